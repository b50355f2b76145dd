"""Chat templates rendered by generate/chat.py equal transformers' apply_chat_template."""
import pytest

from colibri_dist.errors import InvalidArgument
from colibri_dist.generate import SamplingParams
from colibri_dist.generate.api import chat
from colibri_dist.generate.chat import ChatTemplate

from .fake_model import FakeStepModel
from .tokenizers_fixture import byte_level_bpe

transformers = pytest.importorskip("transformers")

LLAMA3 = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if loop.index0 == 0 and message['role'] != 'system' %}{{ '<|start_header_id|>system<|end_header_id|>\n\n"
    "You are helpful.<|eot_id|>' }}{% endif %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")

CHATML_TOOLS = """{%- set ns = namespace(sys=false) -%}
{%- for m in messages %}
    {%- if m.role == 'system' %}{% set ns.sys = true %}{% endif %}
{%- endfor %}
{%- if not ns.sys %}<|im_start|>system
Default system.{% if tools %} Tools: {{ tools | tojson }}{% endif %}<|im_end|>
{% endif %}
{%- for m in messages %}
    {%- if m.role not in ['system', 'user', 'assistant'] %}{{ raise_exception('bad role ' + m.role) }}{% endif %}
    {%- if m.role == 'assistant' %}<|im_start|>assistant
{% generation %}{{ m.content }}{% endgeneration %}<|im_end|>
{% else %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endif %}
    {%- if loop.index > 50 %}{% break %}{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""

MISTRAL = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}{% endif %}{% endfor %}")

CONVERSATIONS = [
    [{"role": "user", "content": "one two three?"}],
    [{"role": "system", "content": "Count in words."}, {"role": "user", "content": "  one two  "},
     {"role": "assistant", "content": "three four"}, {"role": "user", "content": "héllo 日本語 {\"json\": 1} <b>"}],
    [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b", "tool_calls": None},
     {"role": "user", "content": "c"}],
]


def _hf_tokenizer(tmp_path, template):
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=byte_level_bpe(), bos_token="<s>", eos_token="</s>",
                                                unk_token="<unk>")
    fast.chat_template = template
    fast.save_pretrained(tmp_path)
    return transformers.AutoTokenizer.from_pretrained(tmp_path)


@pytest.mark.parametrize("template", [LLAMA3, CHATML_TOOLS, MISTRAL], ids=["llama3", "chatml", "mistral"])
def test_render_equals_transformers(tmp_path, template):
    hf = _hf_tokenizer(tmp_path, template)
    mine = ChatTemplate.from_dir(str(tmp_path))
    for conv in CONVERSATIONS:
        try:
            want = hf.apply_chat_template(conv, tokenize=False, add_generation_prompt=True)
        except Exception as exc:              # the template rejects it: so must we, with its message
            with pytest.raises(InvalidArgument, match=str(exc).replace(".", r"\.")):
                mine.render(conv)
            continue
        assert mine.render(conv) == want
        assert mine.render(conv, add_generation_prompt=False) == hf.apply_chat_template(conv, tokenize=False)
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"a": "int <x>"}}}]
    assert mine.render(CONVERSATIONS[0], tools=tools) == hf.apply_chat_template(
        CONVERSATIONS[0], tools=tools, tokenize=False, add_generation_prompt=True)


def test_raise_exception_is_invalid_argument(tmp_path):
    hf = _hf_tokenizer(tmp_path, MISTRAL)
    bad = [{"role": "assistant", "content": "x"}]
    with pytest.raises(Exception, match="roles must alternate"):
        hf.apply_chat_template(bad, tokenize=False)
    with pytest.raises(InvalidArgument, match="roles must alternate"):
        ChatTemplate.from_dir(str(tmp_path)).render(bad)


def test_from_config_forms(tmp_path):
    t = ChatTemplate.from_config({"chat_template": [{"name": "tool_use", "template": "T"},
                                                    {"name": "default", "template": "{{ bos_token }}D"}],
                                  "bos_token": {"content": "<s>", "special": True}})
    assert t.render([{"role": "user", "content": "x"}]) == "<s>D"
    with pytest.raises(InvalidArgument, match="no chat template"):
        ChatTemplate.from_config({})
    with pytest.raises(InvalidArgument, match="syntax error at line 1"):
        ChatTemplate("{% if %}")
    with pytest.raises(InvalidArgument, match="non-empty list"):
        t.render([])


def test_chat_prompt_ids_equal_transformers_and_errors_per_request(tmp_path):
    hf = _hf_tokenizer(tmp_path, MISTRAL)
    tok = byte_level_bpe()
    model = FakeStepModel(vocab_size=tok.get_vocab_size())
    convs = [CONVERSATIONS[0], [{"role": "assistant", "content": "x"}], CONVERSATIONS[2]]
    out = chat(model, tok, ChatTemplate.from_dir(str(tmp_path)), convs, SamplingParams(max_tokens=3))
    for i in (0, 2):
        want = hf.apply_chat_template(convs[i], add_generation_prompt=True)["input_ids"]
        assert out[i].prompt_token_ids == list(want) and len(out[i].token_ids) == 3
    assert "roles must alternate" in str(out[1].error) and out[1].token_ids == []
    single = chat(model, tok, ChatTemplate.from_dir(str(tmp_path)), CONVERSATIONS[0], SamplingParams(max_tokens=3))
    assert single[0].token_ids == out[0].token_ids
