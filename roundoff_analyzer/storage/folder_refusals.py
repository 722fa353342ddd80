"""What a sweep refuses to write into, before anything is written: a path that is a file, a training's folder, a folder
that is no sweep's (the kinds of folder: folder_kind.py), and links among the entries it writes."""

from __future__ import annotations

from pathlib import Path

from ..core.environment import os_error_line
from ..core.errors import InputError
from ..core.json_files import parse_json
from ..measuring.yardstick_files import YARDSTICKS
from .folder_kind import refuse_foreign_folder
from .folder_lock import LOCK
from .result_schemas import MANIFEST, MODULES, PARAM_ERRORS, PART_ERRORS, PROFILE, RESULTS, SHARDS, TIMING
from .shard_integrity import SET_ASIDE, vouching_shard

# Everything a sweep writes or deletes in its folder: none of these may be a link out of it.
WRITTEN_ENTRIES = (
    MANIFEST,
    RESULTS,
    PARAM_ERRORS,
    PROFILE,
    MODULES,
    PART_ERRORS,
    TIMING,
    SHARDS,
    SET_ASIDE,
    LOCK,
    YARDSTICKS,
    "slurm",
    "figures",
    "report.md",
)


def refuse_other_kind(root: Path, kind: str, other_manifest: str, other_kind: str) -> None:
    """Refuse a folder holding another kind's results, --force or not: --force replaces
    only a folder of its own kind."""
    if (Path(root) / other_manifest).is_file():
        raise InputError(
            f"output folder '{root}' holds {other_kind} ({other_manifest}), not {kind}; --force replaces only "
            f"{kind}: use another --out"
        )


def refuse_file_path(root: Path) -> None:
    """Refuse an output folder path that is a file, or lies under one."""
    if root.exists() and not root.is_dir():
        raise InputError(f"output folder '{root}' is a file; give --out a folder path")
    blocking = next((p for p in root.parents if p.exists() and not p.is_dir()), None)
    if blocking is not None:
        raise InputError(
            f"cannot create the output folder '{root}': a part of the path is a file, not a folder ({blocking})"
        )


# What a sweep may have written before its manifest (a lock, an empty shards folder), or beside a manifest that no
# longer reads (the shards and the tables say what they are): a folder holding only these is taken as one the sweep
# created. Not the report and figures/: those names are also a user's own, unless a shard vouches for the folder.
_BEFORE_MANIFEST = (LOCK, SHARDS, SET_ASIDE, YARDSTICKS, "slurm", RESULTS, PARAM_ERRORS, PROFILE)


def manifest_json(root: Path) -> tuple[object, str | None]:
    """The folder's `manifest.json` as JSON (None where there is none or it does not parse), and why it is no manifest
    (None where it holds an object, or is missing)."""
    path = Path(root) / MANIFEST
    if not path.is_file():
        return None, None
    try:
        manifest = parse_json(path.read_text())
    except UnicodeDecodeError:
        return None, "not UTF-8 text"
    except ValueError:
        return None, "not JSON"
    except OSError as exc:
        return None, f"unreadable: {os_error_line(exc)}"
    if not isinstance(manifest, dict):
        return manifest, f"a JSON {type(manifest).__name__}, not an object"
    return manifest, None


def refuse_foreign_sweep_folder(root: Path) -> None:
    """Refuse a non-empty folder that is no sweep's (see storage/folder_kind.py); a `manifest.json` of another tool
    counts as the user's file. A folder whose manifest is missing or damaged is a sweep's when one of its shards vouches
    for it (its bytes match their recorded content hash and carry a sweep's fingerprint): the sweep writes the manifest
    again, from the command, and the shards' fingerprints say which of them are that sweep's."""
    manifest, damage = manifest_json(root)
    if isinstance(manifest, dict):
        ours = manifest.get("tool") == "roundoff-analyzer"
        refuse_foreign_folder(root, "a sweep", lambda _: ours, _BEFORE_MANIFEST)
        return
    if vouching_shard(Path(root) / SHARDS) is not None:
        return
    refuse_foreign_folder(
        root,
        "a sweep",
        lambda _: False,
        (*_BEFORE_MANIFEST, MANIFEST),
        unknown_because=None
        if damage is None
        else f"has a damaged {MANIFEST} ({damage}) and no shard whose bytes match their recorded content hash",
    )
