"""A training's folder: `train_manifest.json` says what was trained; a folder holding another training (or a sweep)
is refused unless `--force`, which removes what a training wrote there and nothing else."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
from pathlib import Path
from typing import Any

from ..core.errors import InputError
from ..core.json_files import parse_json
from ..core.safe_files import refuse_links, remove_abandoned_temporaries
from ..storage.folder_kind import refuse_foreign_folder, refuse_unwritable
from ..storage.folder_lock import LOCK
from ..storage.folder_refusals import refuse_file_path, refuse_other_kind
from ..storage.manifest_schema import read_train_manifest
from ..storage.result_schemas import MANIFEST, TRAIN_MANIFEST
from ..storage.results import atomic_write_bytes
from .files import CHECKPOINTS, RESUME

KIND = "roundoff-train"
SETUPS = "setups"
LOG = "training_log.parquet"
SUMMARY = "training_summary.parquet"
REPORT = "training_report.md"
FIGURES = "figures"
LOSS_FIGURE = (
    "loss_curves"  # figures/loss_curves.png and .svg: the training's only files in a folder a report may share
)
# Everything a training writes or deletes in its folder: none of these may be a link out of it.
WRITTEN_ENTRIES = (TRAIN_MANIFEST, SETUPS, LOG, SUMMARY, REPORT, FIGURES, CHECKPOINTS, RESUME.parts[0], LOCK)


def setup_folder(index: int, label: str) -> str:
    """The first setup's folder is the training's own; the others sit under `setups/<label>`."""
    return "." if index == 0 else f"{SETUPS}/{label}"


def read_manifest(root: Path, advice: str = "use another --out, or --force") -> dict | None:
    path = Path(root) / TRAIN_MANIFEST
    if not path.is_file():
        return None
    return read_train_manifest(path, advice)


def check_folder(root: Path, fingerprint: dict[str, Any], force: bool) -> dict | None:
    """Refuse a file where the folder should be, a sweep's folder and a different training unless `force`; returns
    the manifest of the same training found there (to resume it), else None. Writes nothing."""
    root = Path(root)
    refuse_file_path(root)
    refuse_unwritable(root)
    if not root.is_dir():
        return None
    refuse_other_kind(root, "a training", MANIFEST, "a sweep")
    # Before its manifest a training has written at most its lock; a manifest that no longer reads is its own to judge.
    refuse_foreign_folder(root, "a training", _holds_training, (LOCK, TRAIN_MANIFEST))
    refuse_links(root, WRITTEN_ENTRIES)
    manifest = read_manifest(root) if not force else _readable_manifest(root)
    if manifest is None:
        return None
    found = manifest.get("fingerprint") if manifest.get("kind") == KIND else None
    if found == fingerprint:
        return manifest
    if force:
        return None
    found = found if isinstance(found, dict) else {}
    differs = sorted(k for k in fingerprint if found.get(k) != fingerprint[k])
    raise InputError(
        f"output folder '{root}' holds a different training (differs in: {', '.join(differs) or 'everything'}); "
        "use another --out, or --force to replace it"
    )


def _holds_training(root: Path) -> bool:
    try:
        manifest = parse_json((root / TRAIN_MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and manifest.get("kind") == KIND


def _readable_manifest(root: Path) -> dict | None:
    try:
        return read_manifest(root)
    except InputError:
        return None


def clear_training(root: Path) -> None:
    """What a training wrote in `root` (with --force): its entries only, links refused, never followed; in `figures/`,
    which a sweep's report may share, only the training's own figure."""
    refuse_links(root, WRITTEN_ENTRIES)
    for name in WRITTEN_ENTRIES:
        entry = root / name
        if name in (LOCK, FIGURES) or not entry.exists():
            continue
        shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    for kind in ("png", "svg"):
        (root / FIGURES / f"{LOSS_FIGURE}.{kind}").unlink(missing_ok=True)


def remove_abandoned(root: Path) -> list[Path]:
    """The `.NAME.tmp-PID` files a killed training left half-written (its log, a checkpoint, a resume state), in the
    folder and in the folders a training writes below it; returns them. Called under the folder's lock: no other
    training is writing there, and a temporary of a process still alive is kept all the same."""
    folders = [root]
    for name in (SETUPS, CHECKPOINTS, RESUME.parts[0], FIGURES):
        if (root / name).is_dir():  # links out of the folder are refused before this
            folders += [Path(below) for below, _, _ in os.walk(root / name)]
    return [removed for folder in folders for removed in remove_abandoned_temporaries(folder)]


def write_manifest(root: Path, manifest: dict) -> None:
    atomic_write_bytes(root / TRAIN_MANIFEST, (json.dumps(manifest, indent=1, default=str) + "\n").encode())


def utc_now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
