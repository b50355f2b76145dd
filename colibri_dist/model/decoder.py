"""Decoder: one batched forward step of the whole model over many sequences.

Role in the data flow: LLM (and the generation scheduler through it) calls forward(steps), each
step = (sequence, new token ids, want): want True = logits after every new token, False = after the
last one only, or a list of indices into the new tokens (negative from the end). The tokens of all steps go through the stack together:
embed -> per layer [rmsnorm -> attention (attention.py, paged KV) -> residual -> rmsnorm ->
MoE (MoeExecutor: route/group/experts/combine over the expert store) or dense MLP -> residual] ->
final norm -> lm_head on the rows asked for. Every op is row-wise or per (token, head), so a
sequence's logits are bit-identical whatever else is in the step, how its prompt was chunked,
the thread count, the expert cache budget or tier.

A GQA layer whose experts are mapped in this process (MoeExecutor.mapped_moe) or that has a dense MLP runs
as one native call (native.layer_forward: the same ops in C, the same bits); MLA layers, experts
behind a RAM budget or on pool workers take the op-by-op path (decoder.fused = False forces it).
"""
import os
from dataclasses import dataclass
from itertools import accumulate

import numpy as np

from ..errors import InvalidArgument, NativeError
from .. import native
from .attention import Batch, attend, attn_spec
from .weights import check_ids

DEBUG_CHECKS = os.environ.get("COLIBRI_DEBUG_CHECKS", "") not in ("", "0")   # every native call checks its args


class Decoder:
    def __init__(self, arch, weights, engine, cache, moe=None, salt=None):
        self.arch, self.w, self.executor, self.cache = arch, weights, engine, cache
        self.fused = True                                   # the switch; fusing() says whether it applies now
        self._plans = {}                                    # layer -> (MoeLayer or None, native.LayerPlan)
        self._plans_at, self._plan_list = None, None        # the expert-set version the fused plans are of
        self._head = None                                   # native.StepHead of the fused steps (made once)
        self.salt = salt                                    # () -> what the KV bits depend on (prefix cache key)
        self.moe = moe if moe is not None else engine      # anything with moe_forward(layer, x)
        self.rt = engine.runtime
        self.specs = [attn_spec(arch, i, cache) for i in range(arch.n_layers)]
        self.tokens_processed = 0

    def _plan(self, steps, trusted):
        """Lay the steps out (checked unless trusted), then reserve KV blocks for all (nothing reserved when one
        cannot fit). -> StepLayout."""
        if not steps:
            raise InvalidArgument("forward: no steps given")
        lay = _trusted_layout(steps) if trusted else self._checked_layout(steps)
        lay.pos0 = [seq.length for seq, _, _ in steps]
        self.cache.reserve_all([seq for seq, _, _ in steps], lay.counts)
        return lay

    def _checked_layout(self, steps):
        """StepLayout of steps from anywhere: each sequence once, token ids 1-D integers in the vocabulary,
        want a bool or row indices (InvalidArgument naming the step otherwise)."""
        ids, counts, picks, seen = [], [], [], set()
        for i, (seq, tokens, want) in enumerate(steps):
            if id(seq) in seen:
                raise InvalidArgument(f"forward: sequence {seq.id} appears twice in one step")
            seen.add(id(seq))
            t = np.asarray(tokens)
            if t.ndim != 1 or not t.size or t.dtype.kind not in "iu":
                check_ids(tokens, self.arch.vocab_size, f"step {i} (sequence {seq.id})")    # raises, naming it
            ids.append(t)
            counts.append(t.size)
            picks.append(_rows(want, t.size, i))
        flat = np.concatenate(ids) if len(ids) > 1 else ids[0]
        if flat.min() < 0 or flat.max() >= self.arch.vocab_size:
            for i, ((seq, _, _), t) in enumerate(zip(steps, ids)):
                check_ids(t, self.arch.vocab_size, f"step {i} (sequence {seq.id})")           # names the first
        starts = list(accumulate(counts, initial=0))
        rows = np.concatenate([starts[i] + p for i, p in enumerate(picks)]) if len(picks) > 1 else picks[0]
        return StepLayout(flat.tolist(), counts, starts, rows, [len(p) for p in picks])

    def sync_salt(self):
        """Re-key the prefix cache when what the KV bits depend on changed (e.g. a hot-added expert)."""
        if self.salt is not None:
            self.cache.set_salt(self.salt())

    def forward(self, steps, trusted=False):
        """steps: [(seq, token ids, want)] -> per step float32 logits [rows asked for, vocab]. trusted: the
        generation engine's steps, made from requests add_request checked (token ids in the vocabulary, each
        sequence once, want a bool), are not checked again (COLIBRI_DEBUG_CHECKS=1 checks them anyway)."""
        self.executor.model.check_unchanged()     # the mmap'd file edited in place: refuse (reader.py)
        self.sync_salt()
        lay = self._plan(steps, trusted and not DEBUG_CHECKS)
        ids = np.array(lay.ids, dtype=np.int32)
        plans = self._fused_plans() if self.fusing() else None
        if plans and None not in plans and not DEBUG_CHECKS:
            logits = self._whole_step(plans, steps, lay, ids)
        else:
            logits = self._layer_by_layer(plans, steps, lay, ids)
        for (seq, _, _), a, b in zip(steps, lay.starts, lay.starts[1:]):
            self.cache.commit(seq, lay.ids[a:b])
        self.tokens_processed += ids.size
        self.executor.model.check_unchanged()
        out, at = [], 0
        for n in lay.n_rows:
            out.append(logits[at:at + n])
            at += n
        return out

    def _whole_step(self, plans, steps, lay, ids):
        """Every layer fused: the step is native.fused_forward (the same C calls, checked once above)."""
        heat = self.executor.count_routed if self.executor.heat.on else None
        positions = lay.pos0 if len(lay.ids) == len(steps) else \
            [p + j for p, n in zip(lay.pos0, lay.counts) for j in range(n)]                 # decode: pos0
        packed = native.pack_step(lay.starts, lay.pos0, positions, [seq.blocks for seq, _, _ in steps])
        if self._head is None:
            self._head = native.StepHead(self.w.embed, self.w.final_norm, self.arch.rms_eps, self.w.lm_head)
        try:
            return native.fused_forward(self.rt, plans, self._head, ids, packed, lay.rows, self.executor.config.top_k,
                                        heat)
        except NativeError as exc:
            layer = getattr(exc, "layer", None)
            if layer is None:
                raise
            raise NativeError(f"{self.executor.path}: layer {layer}: {exc.message}", exc.code) from exc

    def _layer_by_layer(self, plans, steps, lay, ids):
        """Op by op (MLA, experts elsewhere), or fused layer by layer through the checked wrappers."""
        seq_start, pos0 = np.array(lay.starts, dtype=np.int32), np.array(lay.pos0, dtype=np.int32)
        positions = pos0 if ids.size == len(steps) else \
            np.arange(ids.size, dtype=np.int32) + np.repeat(pos0 - seq_start[:-1], lay.counts)   # decode: pos0
        batch = Batch(seq_start, pos0, positions, [seq.table() for seq, _, _ in steps])
        h = native.embed(self.w.embed, ids)
        x = np.empty_like(h)     # every norm's output, reused: this call's own (lanes may run forward at once)
        step = native.Step(batch.seqs, positions, h, self.executor.config.top_k) if plans else None
        for layer, lw in enumerate(self.w.layers):
            plan = plans[layer] if plans else None
            if plan is not None:
                self._fused_layer(layer, plan, step)
                continue
            native.rmsnorm(h, lw.ln_attn, self.arch.rms_eps, out=x)
            h += attend(self.rt, self.arch, layer, lw, x, batch, self.cache, self.specs[layer])
            native.rmsnorm(h, lw.ln_mlp, self.arch.rms_eps, out=x)
            h += self.rt.shared_forward(x, lw.mlp) if lw.mlp is not None else self.moe.moe_forward(layer, x)
        rows = lay.rows
        if not rows.size:
            return np.zeros((0, self.arch.vocab_size), np.float32)
        x = native.rmsnorm(np.ascontiguousarray(h[rows]), self.w.final_norm, self.arch.rms_eps)
        return self.rt.matmul(x, self.w.lm_head)

    def fusing(self):
        """Layers may run fused: GQA, and the MoE executor is the engine itself (not a pool, a meter, a recorder)."""
        return self.fused and not self.arch.mla and self.moe is self.executor

    def _fused_plans(self):
        """Every layer's LayerPlan (None: op by op), rebuilt only when the expert set changed (a hot-add)."""
        version = self.executor.segments.version
        if self._plans_at != version:
            self._plan_list = [self._plan_of(layer, lw) for layer, lw in enumerate(self.w.layers)]
            self._plans_at = version
        return self._plan_list

    def _plan_of(self, layer, lw):
        """The layer's native.LayerPlan, or None when its experts are not mapped here (a RAM budget)."""
        moe = None if lw.mlp is not None else self.executor.mapped_moe(layer)
        if lw.mlp is None and moe is None:
            return None
        cached = self._plans.get(layer)
        if cached is None or cached[0] is not moe:          # a hot-add rebuilt the layer's MoeLayer
            a = self.arch
            plan = native.LayerPlan(a.hidden, a.rms_eps, lw.ln_attn, lw.ln_mlp, lw.mats, lw.biases, lw.norms,
                                    a.qk_norm, a.clip_qkv, a.rope, self.specs[layer], self.cache.k[layer],
                                    self.cache.v[layer], moe=moe, mlp=lw.mlp, sinks=lw.sinks)
            cached = self._plans[layer] = (moe, plan)
        return cached[1]

    def _fused_layer(self, layer, plan, step):
        try:
            native.layer_forward(self.rt, plan, step)
        except NativeError as exc:                          # name the file and layer, as MoeExecutor.moe_forward does
            raise NativeError(f"{self.executor.path}: layer {layer}: {exc.message}", exc.code) from exc
        if plan.top_k and self.executor.heat.on:
            self.executor.count_routed(layer, step.idx)


def _rows(want, n, i):
    """Indices into a step's n new tokens whose logits are asked for."""
    if isinstance(want, (bool, np.bool_)):
        return np.arange(n) if want else np.array([n - 1])
    try:
        rows = np.asarray(want, dtype=np.int64).reshape(-1)
    except (TypeError, ValueError):
        raise InvalidArgument(f"step {i}: want must be True, False or a list of token indices, got {want!r}") from None
    if rows.size and (rows.min() < -n or rows.max() >= n):
        raise InvalidArgument(f"step {i}: logits position out of range for {n} tokens: {want!r}")
    return np.where(rows < 0, rows + n, rows)


@dataclass
class StepLayout:
    """One forward step's tokens laid out: every step's new token ids concatenated (Python ints), each step's
    count and first index into them (starts, S + 1 of them), the rows of logits asked for (indices into the
    step's tokens, int64), how many of them each step asked, and each sequence's first position (_plan)."""
    ids: list
    counts: list
    starts: list
    rows: object
    n_rows: list
    pos0: list = None


def _trusted_layout(steps):
    """StepLayout of the engine's steps (token ids lists of ints in the vocabulary, want a bool): no checks."""
    ids, counts, rows, n_rows = [], [], [], []
    for _, tokens, want in steps:
        at, n = len(ids), len(tokens)
        ids += tokens
        counts.append(n)
        if want:
            rows += range(at, at + n)
        else:
            rows.append(at + n - 1)
        n_rows.append(n if want else 1)
    return StepLayout(ids, counts, list(accumulate(counts, initial=0)), np.array(rows, dtype=np.int64), n_rows)
