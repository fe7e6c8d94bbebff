"""OpenAI's response_format -> a GBNF grammar for the engine (Generate.grammar).

{"type": "json_object"}: any JSON object (llama-cpp-python's JSON grammar). {"type": "json_schema",
"json_schema": {"name", "schema", "strict"}}: the schema converted by llama-cpp-python's JSON-schema
converter (llama.cpp's json-schema-to-grammar), so the answer matches the schema whatever the model.
A schema keyword the converter would not enforce (numeric bounds, uniqueItems, not, ...) or a string
format it does not know is refused with a 400 naming it, rather than silently left unchecked;
annotations (title, description, default, examples) are fine. `strict` false is enforced all the same.

The converter comes with llama-cpp-python (engine.llm.grammars), imported on the first structured
request (the server process has no other use for llama.cpp's library).
"""

from __future__ import annotations

import json
from typing import Any

from engine.serve.errors import ApiError

PARAM = "response_format"
# keywords that constrain a value and that the converter leaves unchecked
UNENFORCED = (
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "uniqueItems", "contains",
    "minContains", "maxContains", "minProperties", "maxProperties", "patternProperties", "propertyNames",
    "dependentRequired", "dependentSchemas", "dependencies", "if", "then", "else", "not", "unevaluatedProperties",
    "unevaluatedItems", "additionalItems",
)  # fmt: skip
FORMATS = ("date", "time", "date-time", "uuid", "uuid1", "uuid2", "uuid3", "uuid4", "uuid5")
TYPES = ("object", "array", "string", "number", "integer", "boolean", "null")
MAX_SCHEMA_DEPTH = 64


def _bad(message: str) -> ApiError:
    return ApiError(400, message, param=PARAM)


def grammar_for(fmt: Any) -> tuple[str, str]:
    """(GBNF grammar, what it enforces: "" / "json_object" / "json_schema NAME") for a response_format."""
    if fmt is None:
        return "", ""
    if not isinstance(fmt, dict) or not isinstance(fmt.get("type"), str):
        raise _bad("response_format must be an object with a type: 'text', 'json_object' or 'json_schema'")
    kind = fmt["type"]
    if kind == "text":
        return "", ""
    if kind == "json_object" and "schema" in fmt:  # llama.cpp's server: a schema inside json_object
        return grammar_for({"type": "json_schema", "json_schema": {"schema": fmt["schema"]}})
    if kind == "json_object":
        from engine.llm.grammars import JSON_OBJECT

        return JSON_OBJECT, "json_object"
    if kind != "json_schema":
        raise _bad(f"response_format type must be 'text', 'json_object' or 'json_schema', got {kind!r}")
    spec = fmt.get("json_schema")
    if not isinstance(spec, dict):
        raise _bad("response_format json_schema must be an object with a name and a schema")
    name = spec.get("name", "")
    if not isinstance(name, str):
        raise _bad("response_format json_schema.name must be a string")
    if not isinstance(spec.get("strict", False), bool | None):
        raise _bad("response_format json_schema.strict must be true or false")
    schema = spec.get("schema", {})
    if not isinstance(schema, dict):
        raise _bad(f"response_format json_schema.schema must be a JSON Schema object, got {type(schema).__name__}")
    _check(schema, "schema", schema, 0)
    return _convert(schema), f"json_schema {name}".rstrip()


def _convert(schema: dict[str, Any]) -> str:
    from engine.llm.grammars import GrammarError, json_schema_grammar

    try:
        return json_schema_grammar(schema)
    except GrammarError as exc:
        raise _bad(f"response_format json_schema.schema cannot be enforced: {exc}") from None


def _check(node: Any, where: str, root: dict[str, Any], depth: int) -> None:
    """Refuse what the converter would not enforce, naming where it is."""
    if depth > MAX_SCHEMA_DEPTH:
        raise _bad("response_format json_schema.schema is nested too deeply")
    if not isinstance(node, dict):
        raise _bad(f"response_format: {where} must be a schema object, got {json.dumps(node)[:40]}")
    for key in UNENFORCED:
        if key in node:
            raise _bad(f"response_format: {where} uses {key!r}, which this server cannot enforce; leave it out")
    kinds = node.get("type")
    for kind in kinds if isinstance(kinds, list) else [kinds] if kinds is not None else []:
        if kind not in TYPES:
            raise _bad(f"response_format: {where} has type {kind!r}; JSON Schema types are {', '.join(TYPES)}")
    fmt = node.get("format")
    if fmt is not None and fmt not in FORMATS:
        raise _bad(f"response_format: {where} has format {fmt!r}, which this server cannot enforce ({', '.join(FORMATS)} it can)")
    ref = node.get("$ref")
    if ref is not None and not (isinstance(ref, str) and ref.startswith("#/")):
        raise _bad(f"response_format: {where} refers to {ref!r}; only references inside the schema (#/...) are supported")
    if "allOf" in node:
        parts = node["allOf"]
        if not isinstance(parts, list) or not all(_has_properties(_resolve(p, root)) for p in parts):
            raise _bad(f"response_format: {where} uses allOf, supported only to merge objects with properties")
    for key in ("properties", "$defs", "definitions"):
        children = node.get(key, {})
        if not isinstance(children, dict):
            raise _bad(f"response_format: {where}.{key} must be an object")
        for name, child in children.items():
            _check(child, f"{where}.{key}.{name}", root, depth + 1)
    for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
        children = node.get(key, [])
        if not isinstance(children, list) or (key != "prefixItems" and key in node and not children):
            raise _bad(f"response_format: {where}.{key} must be a non-empty list of schemas")
        for i, child in enumerate(children):
            _check(child, f"{where}.{key}[{i}]", root, depth + 1)
    items = node.get("items")
    for i, child in enumerate(items if isinstance(items, list) else [items] if items is not None else []):
        _check(child, f"{where}.items" + (f"[{i}]" if isinstance(items, list) else ""), root, depth + 1)
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        _check(extra, f"{where}.additionalProperties", root, depth + 1)
    elif extra is not None and not isinstance(extra, bool):
        raise _bad(f"response_format: {where}.additionalProperties must be a schema or true/false")


def _resolve(node: Any, root: dict[str, Any]) -> Any:
    ref = node.get("$ref") if isinstance(node, dict) else None
    if not isinstance(ref, str) or not ref.startswith("#/"):
        return node
    target: Any = root
    for part in ref[2:].split("/"):
        target = target.get(part) if isinstance(target, dict) else None
    return target


def _has_properties(node: Any) -> bool:
    return isinstance(node, dict) and isinstance(node.get("properties"), dict)
