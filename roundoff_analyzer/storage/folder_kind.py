"""Whose folder `--out` names: a sweep or a training writes only into an empty folder, one it created, or one of its
own kind. Any other non-empty folder is the user's (a paper's `report.md`, their figures): it is refused whatever the
options, `--force` included, since `--force` replaces only what the tool wrote.

The check also finds, before anything is printed, a folder that cannot be created or written (a read-only disk, a
virtual filesystem such as /proc), and says why in one line.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from ..core.environment import os_error_line
from ..core.errors import InputError
from ..core.safe_files import is_temporary_name
from ..core.text import printable

# Names shown in the refusal before "and N more".
_SHOWN = 4


def refuse_foreign_folder(
    root: Path,
    kind: str,
    own_kind: Callable[[Path], bool],
    before_manifest: Iterable[str],
    unknown_because: str | None = None,
) -> None:
    """Refuse `root` when it holds anything and is not of `kind`: `own_kind(root)` says whether its manifest is this
    kind's; without such a manifest only `before_manifest` (what the tool writes before its manifest: a lock, an empty
    shards folder, a damaged manifest) and the tool's temporary files may be there. `unknown_because`: why nothing
    shows whose the folder is (a damaged manifest), said instead of calling its files the user's."""
    root = Path(root)
    if not root.is_dir() or own_kind(root):
        return
    allowed = set(before_manifest)
    foreign = sorted(
        entry.name + ("/" if entry.is_dir() and not entry.is_symlink() else "")
        for entry in root.iterdir()
        if entry.name not in allowed and not is_temporary_name(entry.name)
    )
    if not foreign:
        return
    shown = ", ".join(printable(name) for name in foreign[:_SHOWN]) + (
        f" and {len(foreign) - _SHOWN} more" if len(foreign) > _SHOWN else ""
    )
    holds = (
        f"holds files roundoff did not write ({shown})"
        if unknown_because is None
        else f"{unknown_because}, so nothing shows that its files ({shown}) are roundoff's"
    )
    raise InputError(
        f"output folder '{printable(root)}' {holds}; "
        f"{kind} writes only into an empty "
        f"folder, a folder it created or a folder of {kind}, --force included: use another --out"
    )


def refuse_unwritable(root: Path) -> None:
    """Refuse a folder that cannot be written, or created, with the real cause. A missing folder is probed by creating
    its first missing part and removing it again: what the system answers then is what the sweep would meet."""
    root = Path(root)
    if root.is_dir():
        if not os.access(root, os.W_OK | os.X_OK):
            raise InputError(f"cannot write in the output folder '{printable(root)}': permission denied")
        _refuse_virtual(root, root)
        return
    missing = root
    while not missing.parent.exists() and missing.parent != missing:
        missing = missing.parent
    parent = missing.parent
    _refuse_virtual(root, parent)
    try:
        os.mkdir(missing)
    except FileExistsError:
        return  # made by someone else meanwhile: the sweep's own creation decides
    except OSError as exc:
        if exc.errno == errno.ENOENT and parent.is_dir():  # the parent exists, yet the system says it does not
            raise InputError(
                f"cannot create the output folder '{printable(root)}': '{printable(parent)}' accepts no new folders"
            ) from None
        raise InputError(f"cannot create the output folder '{printable(root)}': {os_error_line(exc)}") from None
    os.rmdir(missing)


# Filesystems of the kernel's own state: nothing a user writes belongs there, and some answer mkdir with a wrong cause.
_VIRTUAL = {
    "proc",
    "sysfs",
    "cgroup",
    "cgroup2",
    "debugfs",
    "tracefs",
    "securityfs",
    "devpts",
    "pstore",
    "bpf",
    "configfs",
    "fusectl",
    "mqueue",
    "hugetlbfs",
    "binfmt_misc",
    "efivarfs",
    "autofs",
}


def _refuse_virtual(root: Path, existing: Path) -> None:
    kind = filesystem_type(existing)
    if kind in _VIRTUAL:
        raise InputError(
            f"cannot use '{printable(root)}' as the output folder: '{printable(existing)}' is on the {kind} "
            "filesystem, which shows the system's state and holds no files of yours; give a folder on a disk"
        )


def filesystem_type(path: Path) -> str | None:
    """The type of the filesystem `path` lies on (from /proc/self/mounts; None where that cannot be read)."""
    try:
        resolved = Path(path).resolve()
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except (OSError, RuntimeError):
        return None
    best, kind = -1, None
    for line in mounts:
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        if (resolved == Path(point) or Path(point) in resolved.parents) and len(point) > best:
            best, kind = len(point), fields[2]
    return kind
