"""Stored text on its way to a terminal: a results folder may come from anyone, and an escape code in a
failure message must not move the cursor, retitle the window or hide what follows."""

from __future__ import annotations

import re

# C0 controls, DEL and C1 controls (ESC starts the terminal's escape sequences; C1 0x9b is a one-byte CSI).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(text: object) -> str:
    """`text` with every control character replaced by a space (tabs and newlines included: one line stays one line)."""
    return _CONTROL.sub(" ", str(text))


def shortened(text: object, limit: int = 80) -> str:
    """`text` made printable and cut to about `limit` characters: a name echoed in an error line stays a short line."""
    text = printable(text)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"
