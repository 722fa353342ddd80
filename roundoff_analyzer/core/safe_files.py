"""Writing inside a results folder without ever leaving it: atomic writes that follow no links, a refusal
of links where the tool writes, and the removal of temporary files a killed process left behind.

A folder may come from anyone. A link planted in it (`shards -> /elsewhere`, a temporary file name
pointing at a file outside) must not make a sweep, `--force` or a report write or delete outside it.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import BinaryIO

from .environment import with_path
from .errors import InputError

_TEMPORARY = re.compile(r"^\..+\.tmp-(\d+)$")
# A shard's temporary lives for the time it takes to write one row; Slurm tasks on other nodes may be
# writing theirs (their process ids mean nothing here), so only old ones are known to be abandoned.
ABANDONED_SHARD_TEMPORARY_S = 300.0


def is_temporary_name(name: str) -> bool:
    """A `.NAME.tmp-PID` file: what an atomic write leaves while it writes, or when its process was killed."""
    return _TEMPORARY.match(name) is not None


def temporary_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


def atomic_write(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Write `path` through a temporary file in the same folder, then rename it into place.

    The temporary is created exclusively and without following links, and removed when writing fails
    (a full disk leaves nothing behind); the rename replaces a link at `path` rather than its target."""
    temporary = temporary_name(path)
    if temporary.is_symlink() or temporary.exists():
        temporary.unlink()  # a leftover of a process that had our id; unlink removes a link, never its target
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    try:
        with os.fdopen(descriptor, "wb") as file:
            write(file)
        os.replace(temporary, path)
    except OSError as exc:
        temporary.unlink(missing_ok=True)
        raise with_path(exc, path) from exc
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def refuse_links(folder: Path, names: Iterable[str]) -> None:
    """Refuse a folder where any of `names` (what the tool writes or deletes there), or anything at any depth below
    one of them (`yardsticks/<checkpoint>`, `setups/<setup>/resume`), is a symbolic link that leads out of it."""
    for name in names:
        entry = Path(folder) / name
        _refuse_link(entry)
        if entry.is_dir():
            inside = entry.resolve()
            for below, folders, files in os.walk(entry):  # os.walk lists a link to a folder but does not enter it
                for inner in (*folders, *files):
                    path = Path(below) / inner
                    # A link that stays inside the entry leads nowhere else (submitit links its own files in slurm/).
                    if not (path.is_symlink() and path.resolve().is_relative_to(inside)):
                        _refuse_link(path)


def _refuse_link(entry: Path) -> None:
    if entry.is_symlink():
        raise InputError(
            f"'{entry}' is a symbolic link (to '{os.readlink(entry)}'); roundoff writes only inside the results "
            "folder and follows no links there: remove the link, or use another folder"
        )


def out_folder(value: str | Path | None) -> Path | None:
    """`--out` as a path; an empty one names no folder (it would write into the current one unasked)."""
    if value is None:
        return None
    if not str(value).strip():
        raise InputError("--out is empty; give the path of a folder (. for the current one)")
    return Path(value)


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return pid <= 0x7FFFFFFF  # someone else's process: alive
    return True


def remove_abandoned_temporaries(folder: Path, min_age_s: float = 0.0) -> list[Path]:
    """Delete `.NAME.tmp-PID` files in `folder` (not below it) whose process is gone; returns them.

    Only plain files and links directly in the folder are removed (a link itself, never its target)."""
    removed: list[Path] = []
    if not folder.is_dir() or folder.is_symlink():
        return removed
    now = time.time()
    for entry in folder.iterdir():
        match = _TEMPORARY.match(entry.name)
        if not match or not (entry.is_symlink() or entry.is_file()) or process_alive(int(match.group(1))):
            continue
        try:
            if now - entry.lstat().st_mtime >= min_age_s:
                entry.unlink()
                removed.append(entry)
        except FileNotFoundError:
            pass
    return removed
