"""GBNF grammars for structured output, from llama-cpp-python's grammar module (llama.cpp's JSON
grammar and its JSON-schema converter); the sampler chain enforces them (decoders.make_sampler).

Imported lazily by the HTTP server on its first structured request: it loads llama.cpp's library.
"""

from __future__ import annotations

import json
from typing import Any

from llama_cpp.llama_grammar import JSON_GBNF, SchemaConverter

# any JSON object, root rule "root"
JSON_OBJECT = JSON_GBNF
# a JSON string's characters: no raw control characters (the converter's own rule lets them through,
# and JSON parsers such as pydantic's refuse them)
JSON_CHAR = r'[^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F])'


class GrammarError(ValueError):
    """A schema the converter cannot turn into a grammar; the message is the converter's."""


def json_schema_grammar(schema: dict[str, Any]) -> str:
    """The grammar of the JSON values `schema` admits (references inside it only: #/...)."""
    try:
        converter = SchemaConverter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
        converter.visit(converter.resolve_refs(json.loads(json.dumps(schema)), "schema"), "")
        if "char" in converter._rules:
            converter._rules["char"] = JSON_CHAR
        grammar: str = converter.format_grammar()
        return grammar
    except RecursionError:
        raise GrammarError("it is nested too deeply") from None
    except Exception as exc:  # the converter's asserts, KeyErrors and ValueErrors say what it could not convert
        raise GrammarError(str(exc) or type(exc).__name__) from None
