"""Failures of the machine rather than of the request (a full disk, a read-only or forbidden folder), in one line."""

from __future__ import annotations

import errno

from .text import printable

_REASONS = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "the disk quota is used up",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.ENOTDIR: "a part of the path is a file, not a folder",
    errno.EFBIG: "the file is too large for this file system",
    errno.EISDIR: "it is a folder",
    errno.ENOENT: "no such file or folder",
    errno.ELOOP: "it is a symbolic link, which is not followed",
}


def with_path(exc: OSError, path) -> OSError:
    """`exc` naming `path` where it names no file (a write through an open file, pyarrow's writer): so that its line
    says where the disk was full."""
    if exc.filename:
        return exc
    code = exc.errno or (errno.ENOSPC if "No space left" in str(exc) else None)
    named = OSError(code, exc.strerror or _REASONS.get(code or -1) or str(exc), str(path))
    return named


def os_error_line(exc: OSError) -> str:
    """`'PATH': what went wrong`, e.g. `'out/shards/x.parquet': no space left on the device`."""
    reason = _REASONS.get(exc.errno or -1) or exc.strerror or str(exc) or type(exc).__name__
    where = f"'{printable(exc.filename)}': " if exc.filename else ""
    return f"{where}{reason}"


class EnvironmentFailure(Exception):
    """The machine stopped the sweep (disk full, read-only, permission); what finished is on disk."""

    def __init__(self, out_dir, n_done: int, n_total: int, cause: OSError) -> None:
        self.out_dir, self.n_done, self.n_total, self.cause = out_dir, n_done, n_total, cause
        rest = f"run the other {n_total - n_done}" if n_done < n_total else "write the combined tables and the manifest"
        super().__init__(
            f"cannot go on writing {os_error_line(cause)}; {n_done} of {n_total} configurations are done and saved in "
            f"{printable(out_dir)}; once that is fixed, run the same command again to {rest}"
        )
