"""A JSON file that must hold an object (a manifest, a checkpoint's sidecar), read as data only, and checked against a
pydantic model where the reader relies on its keys: anything else is one InputError line naming the file, the key, what
was found and what was expected. Nested beyond what Python's parser can take (a "bomb") is such a line too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from .errors import InputError
from .text import printable
from .validation import location, phrase

M = TypeVar("M", bound=BaseModel)


def parse_json(text: str) -> Any:
    """`json.loads`, with nesting too deep for the parser a ValueError like any other malformed JSON."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply to be read") from None


def read_json_object(path: Path, what: str, advice: str) -> dict[str, Any]:
    """The object in `path`; anything else is an InputError that says what the file should be and what to do."""
    try:
        content = parse_json(Path(path).read_text())
    except (OSError, ValueError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        detail = str(exc) if type(exc) is ValueError else type(exc).__name__
        raise InputError(f"'{path}' is not {what} ({detail}); {advice}") from None
    if not isinstance(content, dict):
        raise InputError(f"'{path}' is not {what} (it holds a {type(content).__name__}, not an object); {advice}")
    return content


class _Shown(str):
    """A value already written out (shortened): shown as it is, not quoted again."""

    def __repr__(self) -> str:
        return str(self)


def validated(content: dict[str, Any], model: type[M], path: Path, what: str, advice: str) -> M:
    """`content` as `model`; the first key that does not fit is named in one line, with what it held."""
    try:
        return model.model_validate(content)
    except ValidationError as exc:
        error = exc.errors()[0]
        given = printable(repr(error.get("input")))
        shown = error if len(given) <= 60 else {**error, "input": _Shown(given[:57] + "...")}
        raise InputError(f"'{path}' is not {what}: key {location(error)} {phrase(shown)}; {advice}") from None


def read_json_model(path: Path, model: type[M], what: str, advice: str) -> M:
    return validated(read_json_object(path, what, advice), model, path, what, advice)
