"""Server-sent events in OpenAI's streaming format: `data: <json>\\n\\n` per chunk, then `data: [DONE]\\n\\n`.

Role in the data flow: the streaming routes of app.py yield these byte strings to a StreamingResponse.
"""
import json

DONE = b"data: [DONE]\n\n"
HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
MEDIA_TYPE = "text/event-stream"


def event(obj):
    """One SSE event carrying obj as compact JSON (non-ASCII escaped: always valid UTF-8 on the wire)."""
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode("ascii") + b"\n\n"


class Chunks:
    """The chunks of one stream: the envelope's fixed fields (id, object, created, model) are encoded once,
    each chunk encodes only its choices (and usage): the same bytes as event(responses.envelope(...))."""

    def __init__(self, kind, rid, created, model):
        head = json.dumps({"id": rid, "object": kind, "created": created, "model": model}, separators=(",", ":"))
        self._head = b"data: " + head[:-1].encode("ascii") + b',"choices":'

    def event(self, choices, use=None):
        body = _dumps(choices)
        if use is not None:
            body += ',"usage":' + _dumps(use)
        return self._head + body.encode("ascii") + b"}\n\n"


def _dumps(obj):
    return json.dumps(obj, separators=(",", ":"))


def parse(raw):
    """Inverse for tests and the benchmark: bytes of a stream -> list of decoded JSON chunks (no [DONE])."""
    out = []
    for block in raw.decode("utf-8").split("\n\n"):
        if block.startswith("data: ") and block != "data: [DONE]":
            out.append(json.loads(block[len("data: "):]))
    return out
