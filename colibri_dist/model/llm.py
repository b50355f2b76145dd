"""LLM: a whole MoE language model in process — logits, generate, chat and score (vLLM's names).

Role in the data flow: the user-facing object. It opens the container, builds the Architecture
(arch.py) and the kernel-ready weights (weights.py), a MoeExecutor for the MoE layers (expert store:
RAM cache, mmap, SSD offload, prefetch, hot-add) or a caller-given MoE executor (`moe=`, e.g. a
Ray pool client: anything with moe_forward(layer, x)), a paged KVCache, and the Decoder. Besides
the teacher-forced `logits` / `logits_batch` it is the step model the generation scheduler
drives (new_sequence / match_prefix / forward(steps) / release / free_blocks / blocks_needed) and
offers generate / chat / score on top of generate/: they all drive `llm_engine`, one persistent
generate.LLMEngine over this model (vLLM's LLM.llm_engine). The container's generation_config.json
sampling defaults (temperature, top_p, top_k, min_p, repetition_penalty, max_new_tokens) apply to
requests whose params are None or a dict, as vLLM's generation_config="auto". Automatic prefix
caching (on by default; vLLM's enable_prefix_caching) lets a prompt that starts with full KV blocks
another request computed skip their prefill; its key includes the expert set's version, so a hot-add
never reuses stale KV. With a caller-given `moe=` executor the LLM cannot see that version: caching
is off unless the executor has kv_identity() or the caller turns it on (then reset_prefix_cache()
after changing experts).
"""

import numpy as np

from ..errors import InvalidArgument
from ..format.gguf_cache import container_for
from .arch import architecture, kv_row_dims
from .decoder import Decoder
from .kv_budget import check_max_seq_len, default_budget, warn_limits
from .kv_cache import KVCache, block_bytes
from .tokenizer import eos_token_ids, generation_config, hf_tokenizer, load_tokenizer, tokenizer_config
from .vllm_options import check_request_options, check_vllm_options
from .weights import check_ids, load_weights


class LLM:
    def __init__(self, model=None, threads=None, cache_bytes=None, offload_dir=None, kv_cache_bytes=None,
                 max_seq_len=None, kv_cache_dtype="f32", block_size=16, policy="lru", prefetch_workers=2,
                 max_num_batched_tokens=2048, max_num_seqs=64, seed=0, moe=None, w8a8=True, max_model_len=None,
                 enable_prefix_caching=None, allow_long_context=False, checksums=True, prefill_chunk_size=None,
                 offload_compression=None, dtype="auto", tensor_parallel_size=1, gpu_memory_utilization=None,
                 trust_remote_code=False, enforce_eager=False, max_logprobs=20):
        """model: the .colibri path (vLLM's name), or a .gguf file imported once into a cached container
        (format/gguf_cache.py); max_model_len: vLLM's name of max_seq_len (at most the
        model's max_position_embeddings unless allow_long_context=True); seed: the base seed of requests
        without their own (vLLM's); enable_prefix_caching: vLLM's switch (None: on when the KV bits'
        dependencies are visible); checksums=False skips the container's first-use view checks;
        prefill_chunk_size: most prompt tokens of one sequence per step; offload_compression: None | "zstd"
        (the spilled experts under offload_dir). dtype, tensor_parallel_size, gpu_memory_utilization,
        trust_remote_code, enforce_eager: vLLM's, with their CPU meaning or refused (vllm_options.py);
        max_logprobs: vLLM's, the most logprobs / prompt_logprobs a request may ask (more: InvalidArgument)."""
        from ..moe_executor import MoeExecutor
        from ..generate import SchedulerConfig
        if model is None:
            raise InvalidArgument("LLM: model (the .colibri path) is required", parameter="model", value=model)
        seed = check_vllm_options(dtype, tensor_parallel_size, gpu_memory_utilization, trust_remote_code,
                                  enforce_eager, seed)
        if max_model_len is not None:
            if max_seq_len is not None and max_seq_len != max_model_len:
                raise InvalidArgument(f"LLM: max_model_len {max_model_len!r} and max_seq_len {max_seq_len!r} disagree",
                                      parameter="max_model_len", value=max_model_len)
            max_seq_len = max_model_len
        path = container_for(model)
        self.path = str(path)
        self.scheduler_config = SchedulerConfig(max_num_batched_tokens=max_num_batched_tokens,
                                                max_num_seqs=max_num_seqs, base_seed=seed,
                                                prefill_chunk_size=prefill_chunk_size, max_logprobs=max_logprobs)
        self.executor = MoeExecutor(path, threads=threads, cache_bytes=cache_bytes, offload_dir=offload_dir,
                             policy=policy, prefetch_workers=prefetch_workers, w8a8=w8a8, checksums=checksums,
                             compression=offload_compression)
        try:
            self._setup(kv_cache_bytes, max_seq_len, kv_cache_dtype, block_size, moe, max_num_seqs,
                        _prefix_switch(enable_prefix_caching, moe), allow_long_context)
        except BaseException:
            self.executor.close()
            raise
        self._closed = False

    @classmethod
    def from_args(cls, args, moe=None, owns_moe=False):
        """The LLM of a config.EngineArgs (its engine keywords; moe: where its MoE layers run, None = this
        process's MoeExecutor with args' expert store): the one way EngineArgs reach an LLM. owns_moe: close()
        also shuts moe (a pool started for this LLM)."""
        llm = cls(args.model, moe=moe, **args.llm_kwargs())
        llm._owned_moe = moe if owns_moe else None
        return llm

    def _setup(self, kv_cache_bytes, max_seq_len, kv_cache_dtype, block_size, moe, max_num_seqs, prefix,
               allow_long_context):
        model = self.executor.model
        _check_moe_mode(moe, self.executor.runtime.w8a8, self.path)
        meta = model.meta if isinstance(model.meta, dict) else {}
        self.arch = architecture(model.config.family, meta.get("source_config"), where=self.path)
        self.weights = load_weights(model, self.arch)
        max_seq_len = check_max_seq_len(max_seq_len, self.arch.max_position_embeddings, allow_long_context,
                                        self.path)
        salt = self._salt_fn(moe) if prefix else None
        self.cache = self._kv_cache(kv_cache_bytes, max_seq_len, kv_cache_dtype, block_size, max_num_seqs, prefix,
                                    salt)
        self.moe = moe                    # the caller-given MoE executor (a Pool), or None: self.executor
        self.decoder = Decoder(self.arch, self.weights, self.executor, self.cache, moe=moe, salt=salt)
        files = model.tokenizer_files()
        self.tokenizer = load_tokenizer(files, self.path)
        self.tokenizer_config = tokenizer_config(files, self.path)
        self._template_text = files.get("chat_template.jinja")
        self._chat_template = None
        self._hf_tokenizer = None
        self.eos_token_ids = eos_token_ids(files, self.tokenizer, self.path)
        from ..generate.params import generation_defaults
        self.generation_defaults = generation_defaults(generation_config(files, self.path),
                                                       where=f"{self.path}: generation_config.json")
        self._llm_engine = None

    def _kv_cache(self, kv_cache_bytes, max_seq_len, dtype, block_size, max_num_seqs, prefix, salt):
        if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
            raise InvalidArgument(f"block_size must be a positive integer, got {block_size!r}", parameter="block_size",
                                  value=block_size)
        k_row, v_row, _ = kv_row_dims(self.arch)
        n_kv = 1 if self.arch.mla else self.arch.n_kv_heads
        shape = (self.arch.n_layers, n_kv, k_row, v_row)
        per_block = block_bytes(*shape, block_size, dtype, separate_v=not self.arch.mla)
        cap = None
        if kv_cache_bytes is None:
            budget, _, cap = default_budget(per_block, block_size, max_num_seqs, max_seq_len)
        else:
            budget = kv_cache_bytes
            if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)) or budget <= 0:
                raise InvalidArgument(f"kv_cache_bytes must be a positive integer, got {kv_cache_bytes!r}",
                                      parameter="kv_cache_bytes", value=kv_cache_bytes)
        cache = KVCache(*shape, int(budget), max_seq_len, block_size, dtype, separate_v=not self.arch.mla,
                        prefix_caching=prefix, salt=salt() if salt is not None else None)
        warn_limits(cache, max_seq_len, max_num_seqs, kv_cache_bytes is None, cap)
        return cache

    def _salt_fn(self, moe):
        """() -> what the KV bits depend on besides the tokens: the expert set's version."""
        if moe is not None:
            ident = getattr(moe, "kv_identity", None)
            return (lambda: ("moe", ident())) if callable(ident) else (lambda: ("moe", id(moe)))
        segments = self.executor.segments
        return lambda: ("engine", segments.version)

    # -- facts ------------------------------------------------------------------
    @property
    def config(self):
        return self.arch

    @property
    def vocab_size(self):
        return self.arch.vocab_size

    @property
    def max_seq_len(self):
        return self.cache.max_seq_len

    @property
    def block_size(self):
        return self.cache.block_size

    # -- step-model protocol (generate/ drives these) ----------------------------
    def new_sequence(self):
        self._check_open()
        return self.cache.new_sequence()

    def match_prefix(self, seq, token_ids):
        """Start the new seq with the cached full KV blocks token_ids begin with -> tokens covered (0 when
        prefix caching is off). The block of the last token is never matched."""
        self.decoder.sync_salt()
        return self.cache.match_prefix(seq, token_ids)

    def fork_sequence(self, seq):
        """A new sequence with seq's KV (full blocks shared, the partial one copied): n samples of one
        prompt compute it once (generate/scheduler.py)."""
        self._check_open()
        return self.cache.fork(seq)

    def prefix_digests(self, token_ids):
        """Digests naming the full blocks of token_ids match_prefix would look up ([] when caching is off)."""
        self.decoder.sync_salt()
        return self.cache.prefix_digests(token_ids)

    def reset_prefix_cache(self):
        """Forget every cached prefix block (vLLM's name); blocks of running sequences stay theirs."""
        self.cache.reset_prefix_cache()

    @property
    def prefix_caching(self):
        return self.cache.prefix is not None

    def release(self, seq):
        self.cache.release(seq)

    def free_blocks(self):
        return self.cache.free_blocks()

    def blocks_needed(self, seq, n_new):
        return self.cache.blocks_needed(seq, n_new)

    def forward(self, steps):
        """steps: [(seq, token_ids, want_all)] -> per step float32 logits [len or 1, vocab]."""
        self._check_open()
        return self.decoder.forward(steps)

    def forward_trusted(self, steps):
        """forward() of the generation engine's steps (LLMEngine calls this when the model has it): they
        come from requests add_request checked (token ids in the vocabulary, each sequence once, want_all a
        bool), so the decoder does not check them again each step (COLIBRI_DEBUG_CHECKS=1 does)."""
        self._check_open()
        return self.decoder.forward(steps, trusted=True)

    # -- teacher-forced logits ---------------------------------------------------
    def logits(self, token_ids, last_only=False, positions=None):
        """float32 [len(token_ids), vocab]: the logits after each position of one sequence; last_only=True
        gives [1, vocab] (after the last token), positions=[i, ...] the rows of those positions only."""
        return self.logits_batch([token_ids], last_only=last_only, positions=positions)[0]

    def logits_batch(self, sequences, last_only=False, positions=None):
        """One batched forward over several sequences -> list of float32 [len_i, vocab] (or the rows of
        last_only / positions, the same for every sequence; negative positions count from the end)."""
        self._check_open()
        if not isinstance(sequences, (list, tuple)) or not sequences:
            raise InvalidArgument("logits_batch: expected a non-empty list of token id lists")
        want = _want(last_only, positions)
        ids = [check_ids(s, self.vocab_size, f"sequence {i}") for i, s in enumerate(sequences)]
        seqs = [self.cache.new_sequence() for _ in ids]
        try:
            return self.decoder.forward([(s, t, want) for s, t in zip(seqs, ids)])
        finally:
            for s in seqs:
                self.cache.release(s)

    # -- generation (generate/: continuous batching, per-request RNG) -------------
    @property
    def chat_template(self):
        """generate.chat.ChatTemplate of the container (InvalidArgument when it carries none)."""
        if self._chat_template is None:
            from ..generate.chat import ChatTemplate
            self._chat_template = ChatTemplate.from_config(self.tokenizer_config, self._template_text, source=self.path)
        return self._chat_template

    def get_tokenizer(self):
        """vLLM's: a transformers PreTrainedTokenizerFast of the container's tokenizer files (special tokens,
        chat template, model_max_length = max_seq_len) when transformers is installed; else the
        tokenizers.Tokenizer generation uses (`.tokenizer`); None when the container carries none."""
        if self._hf_tokenizer is None:
            self._hf_tokenizer = hf_tokenizer(self.tokenizer, self.tokenizer_config, self._template_text,
                                              self.max_seq_len) or self.tokenizer
        return self._hf_tokenizer

    def get_default_sampling_params(self):
        """vLLM's: SamplingParams from the model's generation_config.json over SamplingParams' defaults."""
        from ..generate import SamplingParams
        return SamplingParams(**self.generation_defaults)

    def new_engine(self):
        """A new LLMEngine over this model (the pool's runner lanes each drive one; they share the KV cache)."""
        from ..generate import LLMEngine
        return LLMEngine(self, self.tokenizer, self.scheduler_config, self.generation_defaults)

    @property
    def llm_engine(self):
        """The persistent LLMEngine generate/chat/score drive (rebuilt, when idle, after
        scheduler_config was replaced)."""
        eng = self._llm_engine
        if eng is None or (eng.scheduler_config is not self.scheduler_config and not eng.has_unfinished()):
            eng = self._llm_engine = self.new_engine()
        return eng

    def generate(self, prompts, sampling_params=None, use_tqdm=True, on_token=None, request_ids=None, on_step=None,
                 errors="raise", *, lora_request=None):
        """prompts: str | token ids | {"prompt"} | {"prompt_token_ids"} | a list of those -> list[RequestOutput]
        in prompt order (`outs[0].outputs[0].text`). sampling_params None = the model's defaults.
        use_tqdm: vLLM's "Processed prompts" bar on stderr (or a tqdm-like class); False for none.
        errors="raise" (vLLM's): an invalid request raises InvalidArgument (a ValueError) naming it before
        anything runs, and a request that fails while running raises its error; this call's other requests
        are aborted. errors="return": that request's RequestOutput carries `.error` (and no outputs), the
        others go on (the batch jobs' per-row errors). Default request ids are "0", "1", ... never reused by
        this LLM's engine. on_token(StreamEvent) per generated token, on_step(StepStats) after every model step.
        It drives llm_engine until these requests finish, in the calling thread: one thread at a time
        may step this LLM's engines (model calls are not concurrent; the pool runner's lanes take turns
        under a lock), so a server that drives llm_engine itself must not call generate meanwhile.
        lora_request: vLLM's; None only (no adapters here)."""
        from ..generate.api import generate
        self._check_open()
        check_request_options(lora_request)
        return generate(self, self.tokenizer, prompts, sampling_params, self.scheduler_config, on_token, request_ids,
                        on_step, engine=self.llm_engine, use_tqdm=use_tqdm, errors=errors)

    def chat(self, messages, sampling_params=None, use_tqdm=True, on_token=None, request_ids=None, on_step=None,
             errors="raise", *, chat_template=None, add_generation_prompt=True, continue_final_message=False,
             tools=None, chat_template_kwargs=None, lora_request=None, chat_template_content_format="auto"):
        """A conversation of {"role", "content"} (or a list of them) rendered with the container's chat
        template, or `chat_template` (a Jinja string) when given, then generated as generate() does.
        add_generation_prompt, continue_final_message, tools, chat_template_kwargs: vLLM's LLM.chat;
        lora_request None only; chat_template_content_format "auto" or "string" (contents go as given)."""
        from ..generate.api import chat
        self._check_open()
        check_request_options(lora_request, chat_template_content_format)
        template = self.chat_template if chat_template is None else self._custom_template(chat_template)
        return chat(self, self.tokenizer, template, messages, sampling_params, self.scheduler_config, on_token,
                    request_ids, on_step, engine=self.llm_engine, use_tqdm=use_tqdm, errors=errors,
                    add_generation_prompt=add_generation_prompt, continue_final_message=continue_final_message,
                    tools=tools, chat_template_kwargs=chat_template_kwargs)

    def _custom_template(self, text):
        from ..generate.chat import ChatTemplate, special_tokens_from_config
        if not isinstance(text, str) or not text:
            raise InvalidArgument(f"chat_template must be a non-empty Jinja string, got {text!r}",
                                  parameter="chat_template", value=text)
        return ChatTemplate(text, special_tokens_from_config(self.tokenizer_config), source="chat_template")

    def score(self, prompts, request_ids=None, on_step=None, use_tqdm=False, errors="raise"):
        """-> list[Score]: the log-probability of each prompt token after the first under this model (a
        language-model log-likelihood; errors= as generate's). vLLM's `LLM.score` is different: a
        cross-encoder's relevance score of (query, document) pairs; the vLLM way to get these numbers is
        generate(prompts, SamplingParams(max_tokens=1, prompt_logprobs=0)).prompt_logprobs, which
        gives the same values here."""
        from ..generate.api import score
        self._check_open()
        return score(self, self.tokenizer, prompts, self.scheduler_config, request_ids, on_step,
                     engine=self.llm_engine, use_tqdm=use_tqdm, errors=errors)

    # -- lifecycle ---------------------------------------------------------------
    def stats(self):
        s = dict(self.executor.stats())
        s["kv_cache"] = {"blocks": self.cache.n_blocks, "block_size": self.cache.block_size,
                         "used_blocks": self.cache.used_blocks(), "peak_blocks": self.cache.peak_blocks,
                         "bytes": self.cache.nbytes(), "dtype": self.cache.dtype,
                         "max_seq_len": self.cache.max_seq_len}
        s["prefix_cache"] = self.cache.prefix.stats() if self.cache.prefix is not None else {"enabled": False}
        if self.cache.prefix is not None:
            s["prefix_cache"]["enabled"] = True
        s["tokens_processed"] = self.decoder.tokens_processed
        return s

    def _check_open(self):
        if getattr(self, "_closed", False):
            raise InvalidArgument(f"{self.path}: the LLM is closed")

    def close(self):
        if not getattr(self, "_closed", True):
            self._closed = True
            try:
                self.executor.close()
            finally:
                owned = getattr(self, "_owned_moe", None)
                if owned is not None:
                    (getattr(owned, "shutdown", None) or owned.close)()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def _check_moe_mode(moe, w8a8, path):
    """A caller-given MoE executor that states its arithmetic (a Pool: .w8a8) must use the LLM's, or a
    token's bits would depend on where its MoE layers ran."""
    theirs = getattr(moe, "w8a8", None)
    if theirs is not None and bool(theirs) != w8a8:
        raise InvalidArgument(f"{path}: LLM(w8a8={w8a8}) but its moe= executor runs w8a8={bool(theirs)}; "
                              f"give both the same mode (Pool(..., w8a8={w8a8}))", parameter="w8a8", value=w8a8)


def _prefix_switch(enable, moe):
    if enable is None:                  # vLLM's default: on, when this LLM can see what the KV bits depend on
        return moe is None or callable(getattr(moe, "kv_identity", None))
    if not isinstance(enable, bool):
        raise InvalidArgument(f"enable_prefix_caching must be True, False or None, got {enable!r}",
                              parameter="enable_prefix_caching", value=enable)
    return enable


def _want(last_only, positions):
    if not isinstance(last_only, bool):
        raise InvalidArgument(f"last_only must be True or False, got {last_only!r}")
    if positions is None:
        return not last_only
    if last_only:
        raise InvalidArgument("pass last_only or positions, not both")
    if isinstance(positions, (int, np.integer)) and not isinstance(positions, bool):
        positions = [positions]
    if not isinstance(positions, (list, tuple, np.ndarray)) or not all(
            isinstance(p, (int, np.integer)) and not isinstance(p, bool) for p in positions):
        raise InvalidArgument(f"positions must be a list of integers, got {positions!r}")
    return [int(p) for p in positions]
