"""Which copy of this package a process runs: the folder it was imported from and a digest of its source files as
they stood then. A worker process started in a folder holding another copy (an older clone) would import that one
where Python puts the working directory first on the path (multiprocessing's fork server runs `python -c`): its rows
would then be another version's numbers in the same tables, or it would fail to read the parent's settings. The
parent hands its identity to each worker, and a worker whose own differs is refused (processes.py)."""

from __future__ import annotations

import hashlib
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]


def _digest(root: Path) -> str:
    digest = hashlib.blake2b(digest_size=16)
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


# Taken when the package is imported (a fork server imports it once, then forks every worker from that code).
IDENTITY: tuple[str, str] = (str(PACKAGE), _digest(PACKAGE))


def differs(expected: tuple[str, str]) -> str | None:
    """Why this process's package is not the one `expected` names (the parent's IDENTITY); None where it is."""
    folder, digest = IDENTITY
    if (folder, digest) == tuple(expected):
        return None
    if folder != expected[0]:
        return f"it imported roundoff_analyzer from {folder}, where the sweep's process imported it from {expected[0]}"
    return (
        f"its roundoff_analyzer ({folder}) is not the code the sweep's process imported: the files changed since "
        f"(digest {digest[:12]}, the sweep's {expected[1][:12]})"
    )
