"""Tool calling on /v1/chat/completions: the tool-call parsers, one row (and one file) each, and which
parser a model family's chat template calls for.

Role in the data flow: ServeConfig.tool_call_parser (`--tool-call-parser`) names a row, or the model's
family picks one (FAMILY_PARSER); ServerState keeps the Parser; chat_output.py runs it over the generated
text through stream.CallStream. choice.py holds what tool_choice "required" / a named function ask of the
sampler (structured outputs) and how that output is read back.
"""
from dataclasses import dataclass
from typing import Callable

from . import deepseek_v3, glm45, hermes


@dataclass(frozen=True)
class Parser:
    name: str
    start: str                      # where a region of calls begins in the generated text
    end: str                        # where it ends (the calls are emitted when it arrives)
    parse: Callable                 # (region text, tools) -> [(name, arguments JSON text)] or None


PARSERS = {p.name: p for p in (Parser("hermes", hermes.START, hermes.END, hermes.parse),
                               Parser("deepseek_v3", deepseek_v3.START, deepseek_v3.END, deepseek_v3.parse),
                               Parser("glm45", glm45.START, glm45.END, glm45.parse))}

# the model_type of a container -> the format its chat template tells the model to write calls in
FAMILY_PARSER = {"qwen3_moe": "hermes", "qwen2_moe": "hermes", "deepseek_v3": "deepseek_v3", "glm4_moe": "glm45"}


def parser_for(name, family):
    """The Parser named by --tool-call-parser, else the family's, else None (auto tool choice refused)."""
    name = name or FAMILY_PARSER.get(family)
    return PARSERS[name] if name else None
