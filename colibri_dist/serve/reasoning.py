"""Reasoning parsers (`--reasoning-parser`): the generated text split into `reasoning_content` and
`content` at the end-of-thinking marker, for a stream and a whole response alike.

Role in the data flow: ServerState keeps the row named by ServeConfig.reasoning_parser; chat_output.py
feeds each choice's text through one ThinkStream before any tool-call parsing (tools apply to the content
after the reasoning). vLLM's rules (deepseek_r1_reasoning_parser, qwen3_reasoning_parser): a leading
`<think>` is dropped (the model may write it, or the template may have put it in the prompt); everything
before `</think>` is reasoning, everything after is content; no `</think>` at all means the output is all
reasoning (the answer was cut). qwen3's `enable_thinking=False` (all content) needs chat_template_kwargs,
which this server does not take, so the two rows behave the same. A `<think>` that is not at the start
stays in the reasoning text.
"""
from .tools.stream import partial_suffix

PARSERS = {"deepseek_r1": ("<think>", "</think>"), "qwen3": ("<think>", "</think>")}


class ThinkStream:
    def __init__(self, markers):
        self.start, self.end = markers
        self.buf = ""
        self.state = "begin"              # begin (a start marker may come) -> think -> content

    def feed(self, text):
        """-> (reasoning text, content text) known after this piece."""
        self.buf += text
        if self.state == "begin":
            head = self.buf.lstrip()
            if self.start.startswith(head) and len(head) < len(self.start):
                return "", ""             # maybe the start marker: wait
            if head.startswith(self.start):
                self.buf = head[len(self.start):]
            self.state = "think"
        if self.state == "think":
            return self._think()
        out, self.buf = self.buf, ""
        return "", out

    def finish(self):
        """-> (reasoning, content) of what was held back."""
        out, self.buf = self.buf, ""
        return ("", out) if self.state == "content" else (out, "")

    def _think(self):
        i = self.buf.find(self.end)
        if i >= 0:
            reasoning, content = self.buf[:i], self.buf[i + len(self.end):]
            self.buf, self.state = "", "content"
            return reasoning, content
        keep = partial_suffix(self.buf, self.end)
        out, self.buf = self.buf[:len(self.buf) - keep], self.buf[len(self.buf) - keep:]
        return out, ""

