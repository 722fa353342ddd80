"""A JSON file that must hold an object (a manifest, a checkpoint's sidecar), read as data only."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .errors import InputError


def read_json_object(path: Path, what: str, advice: str) -> dict[str, Any]:
    """The object in `path`; anything else is an InputError that says what the file should be and what to do."""
    try:
        content = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise InputError(f"'{path}' is not {what} ({type(exc).__name__}); {advice}") from None
    if not isinstance(content, dict):
        raise InputError(f"'{path}' is not {what} (it holds a {type(content).__name__}, not an object); {advice}")
    return content
