"""A fake LLM (the surface jobs and the CLI use: tokenizer, chat_template, generate, chat, score)
over the fake step model and a word-level tokenizer."""
from colibri_dist.errors import InvalidArgument
from colibri_dist.generate import SchedulerConfig
from colibri_dist.generate.api import chat, generate, score
from colibri_dist.generate.chat import ChatTemplate

from gen_fake_model import FakeStepModel
from gen_tokenizers import word_level

TEMPLATE = ("{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
            "{% if add_generation_prompt %}assistant:{% endif %}")


class FakeLLM:
    """The LLM surface the job kinds use, over the fake step model."""

    def __init__(self, fail_on_call=None, template=TEMPLATE):
        self.tokenizer = word_level()
        self._template = template
        self.calls, self.fail_on_call, self.closed = 0, fail_on_call, False

    @property
    def chat_template(self):            # as cd.LLM: InvalidArgument when the model has none
        if self._template is None:
            raise InvalidArgument("fake.colibri: no chat template")
        return ChatTemplate(self._template)

    def _model(self):
        return FakeStepModel(vocab_size=self.tokenizer.get_vocab_size(), max_seq_len=24, eos_token_ids=(1,),
                             eos_boost=1.0, num_blocks=12, block_size=4)

    def _tick(self):
        self.calls += 1
        if self.fail_on_call == self.calls:
            raise RuntimeError("killed")

    def generate(self, prompts, sampling_params=None, use_tqdm=True, on_token=None, on_step=None, errors="raise"):
        self._tick()
        return generate(self._model(), self.tokenizer, prompts, sampling_params,
                        SchedulerConfig(max_num_batched_tokens=16, prefill_chunk_size=5), on_token=on_token,
                        on_step=on_step, errors=errors)

    def chat(self, conversations, sampling_params=None, use_tqdm=True, on_token=None, errors="raise"):
        self._tick()
        return chat(self._model(), self.tokenizer, self.chat_template, conversations, sampling_params,
                    SchedulerConfig(max_num_batched_tokens=16), on_token=on_token, errors=errors)

    def close(self):
        self.closed = True

    def score(self, prompts, errors="raise"):
        self._tick()
        return score(self._model(), self.tokenizer, prompts, SchedulerConfig(max_num_batched_tokens=16), errors=errors)
