"""CallStream: generated text in, as it comes -> the content outside the tool calls and each call once its
end marker arrives.

Role in the data flow: chat_output.py feeds every piece of a choice's text (after any reasoning) through
one CallStream, for a stream and for a whole response alike, so both say the same. Text that may be the
beginning of the parser's START marker is held back until it is known; a region START..END is handed to
the parser and becomes calls, or stays content when it does not parse (vLLM's rule). Whitespace that
only separates content from a call is not content.
"""
import uuid


class CallStream:
    def __init__(self, parser, tools, parallel=True):
        self.parser, self.tools, self.parallel = parser, tools, parallel
        self.buf, self.ws = "", ""        # text not yet placed; whitespace held until we know what follows
        self.in_call = False
        self.parts, self.tail = [], ""    # an open call's pieces since buf, and its last len(END)-1 chars
        self.after_call = False
        self.count = 0                    # calls emitted (their OpenAI index)

    def feed(self, text):
        """-> (content text, [tool call dicts]) known after this piece."""
        if self.in_call and self.parser.end not in self.tail + text:      # still inside a call: keep it
            self.parts.append(text)                                      # (joined once, when it ends)
            self.tail = (self.tail + text)[1 - len(self.parser.end):]
            return "", []
        self.buf += "".join(self.parts) + text
        self.parts, self.tail = [], ""
        content, calls = [], []
        while self._step(content, calls):
            pass
        return "".join(content), calls

    def finish(self):
        """-> (content, calls) of what was held back: an unclosed call region is parsed as it is."""
        content, calls = [], []
        self.buf += "".join(self.parts)
        self.parts, self.tail = [], ""
        if self.in_call:
            self._region(self.buf, content, calls)
        else:
            self._content(self.buf, content)
        self.buf = ""
        if not self.after_call:
            content.append(self.ws)
        self.ws = ""
        return "".join(content), calls

    def _step(self, content, calls):
        start, end = self.parser.start, self.parser.end
        if not self.in_call:
            i = self.buf.find(start)
            if i < 0:
                keep = partial_suffix(self.buf, start)
                self._content(self.buf[:len(self.buf) - keep], content)
                self.buf = self.buf[len(self.buf) - keep:]
                return False
            self._content(self.buf[:i], content)
            self.buf, self.in_call = self.buf[i:], True
        j = self.buf.find(end, len(start))
        if j < 0:
            self.tail = self.buf[1 - len(end):]
            return False
        region, self.buf = self.buf[:j + len(end)], self.buf[j + len(end):]
        self.in_call = False
        self._region(region, content, calls)
        return True

    def _region(self, region, content, calls):
        found = self.parser.parse(region, self.tools)
        if found is None:
            self._content(region, content)
            return
        self.ws, self.after_call = "", True
        for name, args in found:
            if self.parallel or self.count == 0:
                calls.append(new_call(self.count, name, args))
                self.count += 1

    def _content(self, text, content):
        text = self.ws + text
        if not text.strip():              # only whitespace: held until we know what follows it
            self.ws = text
            return
        body = text.strip() if self.after_call else text.rstrip()
        content.append(body)
        self.ws, self.after_call = text[len(text.rstrip()):], False


def new_call(index, name, arguments):
    """A tool call in OpenAI's streamed shape (the whole call in one delta)."""
    return {"index": index, "id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
            "function": {"name": name, "arguments": arguments}}


def partial_suffix(text, marker):
    """Length of the longest end of text that is a proper beginning of marker."""
    for n in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0
