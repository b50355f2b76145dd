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


def parse(raw):
    """Inverse for tests and the benchmark: bytes of a stream -> list of decoded JSON chunks (no [DONE])."""
    out = []
    for block in raw.decode("utf-8").split("\n\n"):
        if block.startswith("data: ") and block != "data: [DONE]":
            out.append(json.loads(block[len("data: "):]))
    return out
