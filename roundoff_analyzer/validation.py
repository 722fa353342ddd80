"""pydantic's validation errors said in the tool's own words: one short phrase per problem, with the value given."""
from __future__ import annotations

from typing import Any

# Error type -> what the value must be; `{name}` fields come from the error's context.
_MUST = {
    "greater_than": "must be greater than {gt}",
    "greater_than_equal": "must be at least {ge}",
    "less_than": "must be less than {lt}",
    "less_than_equal": "must be at most {le}",
    "int_parsing": "must be a whole number",
    "int_type": "must be a whole number",
    "int_from_float": "must be a whole number",
    "float_parsing": "must be a number",
    "float_type": "must be a number",
    "bool_parsing": "must be true or false",
    "bool_type": "must be true or false",
    "string_type": "must be text",
    "list_type": "must be a list",
    "tuple_type": "must be a list",
    "dict_type": "must be a table of key = value",
    "model_type": "must be a table of key = value",
    "too_short": "needs at least {min_length} values",
    "too_long": "takes at most {max_length} values",
    "literal_error": "must be one of {expected}",
    "missing": "is required",
    "extra_forbidden": "is not a known key",
}


def location(error: dict[str, Any]) -> str:
    """`scaler.backoff_factor`; a list entry as `timesteps[0]`."""
    text = ""
    for part in error["loc"]:
        text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else str(part)
    return text or "?"


def phrase(error: dict[str, Any]) -> str:
    """What is wrong with the value, e.g. "must be greater than 0 (got 0)"; a validator's own message as it is."""
    kind = error["type"]
    if kind == "value_error":
        return error["msg"].removeprefix("Value error, ")
    template = _MUST.get(kind)
    text = template.format(**error.get("ctx", {})) if template else error["msg"][:1].lower() + error["msg"][1:]
    given = error.get("input")
    if kind not in ("missing", "extra_forbidden") and not isinstance(given, dict):
        text += f" (got {given!r})"
    return text
