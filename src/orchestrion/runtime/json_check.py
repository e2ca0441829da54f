"""A small JSON Schema checker: enough of the standard to check client tools' parameter schemas and
the arguments a model writes for them, with no dependency.

:func:`schema_problem` says what is malformed in a schema (a ``type`` that is no JSON type,
``properties`` that is not an object of schemas, ``required`` that is not a list of names, ...);
:func:`value_problem` says why a value does not fit a schema. Read: ``type``, ``enum``,
``const``, ``properties``, ``required``, ``additionalProperties``, ``items``, ``anyOf``,
``oneOf``, ``allOf``, ``minItems``/``maxItems``, ``minLength``/``maxLength``, ``minimum``/``maximum``.
A schema holding a ``$ref`` is checked only where it has no ``$ref`` (a reference is trusted).
"""

from __future__ import annotations

from typing import Any

JSON_TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SUBSCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties")


def schema_problem(schema: Any, where: str = "parameters") -> str | None:
    """What is malformed in ``schema`` (None when nothing is)."""
    if isinstance(schema, bool):
        return None
    if not isinstance(schema, dict):
        return f"{where}: a schema must be a JSON object, not {_kind(schema)}"
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind] if kind is not None else []
    for one in kinds:
        if one not in JSON_TYPES:
            return f"{where}.type: {one!r} is not a JSON Schema type ({', '.join(sorted(JSON_TYPES))})"
    for key in _SUBSCHEMA_MAPS:
        value = schema.get(key)
        if value is None:
            continue
        if not isinstance(value, dict):
            return f"{where}.{key}: must be an object of schemas, not {_kind(value)}"
        for name, sub in value.items():
            if (why := schema_problem(sub, f"{where}.{key}.{name}")) is not None:
                return why
    for key in _SUBSCHEMA_LISTS:
        value = schema.get(key)
        if value is None:
            continue
        if not isinstance(value, list) or not value:
            return f"{where}.{key}: must be a non-empty list of schemas"
        for i, sub in enumerate(value):
            if (why := schema_problem(sub, f"{where}.{key}.{i}")) is not None:
                return why
    for key in ("items", "additionalProperties", "not"):
        if key in schema and (why := schema_problem(schema[key], f"{where}.{key}")) is not None:
            return why
    required = schema.get("required")
    if required is not None and (not isinstance(required, list) or not all(isinstance(r, str) for r in required)):
        return f"{where}.required: must be a list of property names"
    if "enum" in schema and not isinstance(schema["enum"], list):
        return f"{where}.enum: must be a list of values"
    return None


def value_problem(schema: Any, value: Any, where: str = "arguments") -> str | None:
    """Why ``value`` does not fit ``schema`` (None when it fits)."""
    if schema is False:
        return f"{where}: no value is allowed here"
    if not isinstance(schema, dict) or "$ref" in schema:
        return None
    kind = schema.get("type")
    if kind is not None:
        kinds = kind if isinstance(kind, list) else [kind]
        if not any(_is(value, k) for k in kinds):
            return f"{where}: expected {' or '.join(kinds)}, got {_kind(value)}"
    if "const" in schema and value != schema["const"]:
        return f"{where}: must be {schema['const']!r}"
    if isinstance(schema.get("enum"), list) and value not in schema["enum"]:
        return f"{where}: must be one of {schema['enum']!r}"
    for why in (_branches(schema, value, where), _object(schema, value, where), _array(schema, value, where),
                _bounds(schema, value, where)):
        if why is not None:
            return why
    return None


def _branches(schema: dict[str, Any], value: Any, where: str) -> str | None:
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            problems = [value_problem(s, value, where) for s in options]
            if all(p is not None for p in problems):
                return problems[0]
    for sub in schema.get("allOf") or []:
        if (why := value_problem(sub, value, where)) is not None:
            return why
    return None


def _object(schema: dict[str, Any], value: Any, where: str) -> str | None:
    if not isinstance(value, dict):
        return None
    found = schema.get("properties")
    props: dict[str, Any] = found if isinstance(found, dict) else {}
    for name in schema.get("required") or []:
        if name not in value:
            return f"{where}: the required property {name!r} is missing"
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        if name in props:
            if (why := value_problem(props[name], item, f"{where}.{name}")) is not None:
                return why
        elif extra is False:
            return f"{where}: no property {name!r} is allowed (the properties are: {', '.join(props) or 'none'})"
        elif isinstance(extra, dict) and (why := value_problem(extra, item, f"{where}.{name}")) is not None:
            return why
    return None


def _array(schema: dict[str, Any], value: Any, where: str) -> str | None:
    if not isinstance(value, list):
        return None
    if isinstance(schema.get("minItems"), int) and len(value) < schema["minItems"]:
        return f"{where}: at least {schema['minItems']} items"
    if isinstance(schema.get("maxItems"), int) and len(value) > schema["maxItems"]:
        return f"{where}: at most {schema['maxItems']} items"
    items = schema.get("items")
    if isinstance(items, dict):
        for i, item in enumerate(value):
            if (why := value_problem(items, item, f"{where}.{i}")) is not None:
                return why
    return None


def _bounds(schema: dict[str, Any], value: Any, where: str) -> str | None:
    if isinstance(value, str):
        if isinstance(schema.get("minLength"), int) and len(value) < schema["minLength"]:
            return f"{where}: at least {schema['minLength']} characters"
        if isinstance(schema.get("maxLength"), int) and len(value) > schema["maxLength"]:
            return f"{where}: at most {schema['maxLength']} characters"
    if isinstance(value, int | float) and not isinstance(value, bool):
        low, high = schema.get("minimum"), schema.get("maximum")
        if isinstance(low, int | float) and value < low:
            return f"{where}: at least {low}"
        if isinstance(high, int | float) and value > high:
            return f"{where}: at most {high}"
    return None


_PLAIN: dict[str, type] = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def _is(value: Any, kind: str) -> bool:
    if isinstance(value, bool):
        return kind == "boolean"
    if kind == "integer":
        return isinstance(value, int) or isinstance(value, float) and value.is_integer()
    if kind == "number":
        return isinstance(value, int | float)
    cls = _PLAIN.get(kind)
    return cls is not None and isinstance(value, cls)


def _kind(value: Any) -> str:
    for name, cls in (("null", type(None)), ("boolean", bool), ("integer", int), ("number", float),
                      ("string", str), ("array", list), ("object", dict)):
        if isinstance(value, cls):
            return name
    return type(value).__name__
