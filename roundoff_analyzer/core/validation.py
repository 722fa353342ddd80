"""pydantic's validation errors said in the tool's own words: one short phrase per problem, with the value given."""

from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

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


def location(error: Mapping[str, Any]) -> str:
    """`scaler.backoff_factor`; a list entry as `timesteps[0]`."""
    text = ""
    for part in error["loc"]:
        text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else str(part)
    return text or "?"


def phrase(error: Mapping[str, Any]) -> str:
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


def _accepts_bool(annotation: Any) -> bool:
    if annotation is bool or annotation is Any:
        return True
    return any(_accepts_bool(argument) for argument in typing.get_args(annotation))


def _holds_bool(value: Any) -> bool:
    return isinstance(value, bool) or (isinstance(value, list) and any(isinstance(item, bool) for item in value))


def bool_given_for_number(values: dict[str, Any], model: type[BaseModel]) -> tuple[str, Any] | None:
    """The first key (`scaler.max_retries`) whose value is true/false where `model` takes no true/false, with the value.
    pydantic would read true as 1 (`timesteps = [true]` would run n_timesteps 1); a file that says true meant something
    else."""
    for key, value in values.items():
        field = model.model_fields.get(key)
        if field is None:
            continue
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel) and isinstance(value, dict):
            inner = bool_given_for_number(value, annotation)
            if inner is not None:
                return f"{key}.{inner[0]}", inner[1]
        elif _holds_bool(value) and not _accepts_bool(annotation):
            return key, value
    return None
