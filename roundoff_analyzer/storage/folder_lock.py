"""One sweep at a time per results folder: an advisory lock that the kernel drops when its process dies.

The lock file records who holds it (process, host, start, command) so that a second sweep can say so.
Slurm array tasks do not take it: they write only their own shards, while the sweep that submitted
them holds the lock.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import socket
import sys
from pathlib import Path

from ..core.errors import InputError
from ..core.json_files import parse_json

LOCK = ".roundoff-lock"


class FolderBusy(InputError):
    """Another process holds the folder."""


class FolderLock:
    def __init__(self, folder: Path) -> None:
        self.path = Path(folder) / LOCK
        self._descriptor: int | None = None

    def acquire(self) -> None:
        while True:
            descriptor = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _describe(os.read(descriptor, 4096))
                os.close(descriptor)
                raise FolderBusy(
                    f"output folder '{self.path.parent}' is in use by another sweep ({holder}); "
                    "wait for it to end, or use another --out"
                ) from None
            if _same_file(descriptor, self.path):
                break
            # The holder removed the file on release after this process opened it: the lock is on a file no longer
            # in the folder, so take it again on the folder's own.
            os.close(descriptor)
        this_process = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "command": " ".join(sys.argv)[:500],
        }
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, json.dumps(this_process).encode(), 0)
        self._descriptor = descriptor

    def release(self) -> None:
        if self._descriptor is None:
            return
        # A finished folder keeps no lock file; it is removed while still locked, so that a process waiting on it
        # sees that it is gone (acquire checks) rather than taking a lock nobody else can see.
        with contextlib.suppress(OSError):
            self.path.unlink()
        fcntl.flock(self._descriptor, fcntl.LOCK_UN)
        os.close(self._descriptor)
        self._descriptor = None


def _same_file(descriptor: int, path: Path) -> bool:
    try:
        held, named = os.fstat(descriptor), os.lstat(path)
    except FileNotFoundError:
        return False
    return (held.st_dev, held.st_ino) == (named.st_dev, named.st_ino)


def _describe(raw: bytes) -> str:
    try:
        holder = parse_json(raw.decode(errors="replace"))
        return f"process {int(holder['pid'])} on {str(holder['host'])[:100]} since {str(holder['since'])[:40]}"
    except (ValueError, KeyError, TypeError):
        return "a process that has not said who it is yet"
