"""What a sweep was run on, as its manifest says: `roundoff check` compares like with like.

The setup is the model and its options, the data, the checkpoint's content, the device type, the
scaler settings and the loss scale; the grid is not part of it (configurations only on one side are
reported as new or missing). Manifests may come from anyone: they are read as JSON and nothing else.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..core.text import printable
from ..storage.manifest_schema import read_manifest
from ..storage.result_schemas import MANIFEST, RESULTS


def manifest_of(path: Path) -> Path | None:
    """The manifest beside a sweep's results: in a sweep folder, or next to a file named results.parquet."""
    path = Path(path)
    folder = path if path.is_dir() else path.parent if path.name == RESULTS else None
    return folder / MANIFEST if folder is not None and (folder / MANIFEST).is_file() else None


def read_setup(path: Path) -> dict[str, Any] | None:
    """The setup of the sweep at `path` (None when there is no manifest
    to say it); an unreadable manifest is an InputError."""
    manifest_path = manifest_of(path)
    if manifest_path is None:
        return None
    manifest = read_manifest(manifest_path, "the setups cannot be compared")
    model = _mapping(manifest.get("model"))
    fingerprint = _mapping(manifest.get("fingerprint"))
    return {
        "model": model.get("name"),
        "model options": _mapping(model.get("options")),
        "data": manifest.get("data"),
        "checkpoint": _mapping(manifest.get("checkpoint")).get("sha256") or _checkpoint_hashes(manifest),
        "device": str(manifest.get("device")).split(":")[0] if manifest.get("device") is not None else None,
        "scaler settings": _mapping(manifest.get("scaler")),
        "loss scale": fingerprint.get("loss_scale", 1.0),
    }


def changed_code(results: Path, baseline: Path) -> str | None:
    """One line naming the user's code whose files differ between the two sweeps, by the SHA-256 each manifest
    recorded (None when none does): a spec's own file (a `file.py:factory` model, a `--library file.py:object`
    plug-in), and each other file its loading brought in (`settings.user_files`), changed, added or removed. The same
    name then ran other code, which a comparison of the errors should say. An unreadable manifest is an InputError."""
    new, old = _settings(results), _settings(baseline)
    new_code, old_code = _mapping(new.get("user_code")), _mapping(old.get("user_code"))
    changed = [spec for spec in new_code if spec in old_code and new_code[spec] != old_code[spec]]
    said = [
        f"{spec} (sha256 {_short(new_code[spec])} now, {_short(old_code[spec])} in the baseline)" for spec in changed
    ]
    new_files, old_files = new.get("user_files"), old.get("user_files")
    unrecorded = None
    if isinstance(new_files, dict) and isinstance(old_files, dict):
        said += [f"{printable(path)} {how}" for path, how in file_changes(new_files, old_files)]
    elif isinstance(new_files, dict) and new_files and old_code:  # the baseline's version recorded the specs' own
        unrecorded = (
            f"the baseline did not record the other files its code imported ({printable(', '.join(new_files))}): "
            "they were not compared"
        )
    differs = f"the code differs from the baseline's: {'; '.join(said)}; the errors are compared across that change"
    return "; ".join(([differs] if said else []) + ([unrecorded] if unrecorded else [])) or None


def file_changes(new: dict[str, Any], old: dict[str, Any]) -> list[tuple[str, str]]:
    """(path, "changed"/"added"/"removed") for each file whose digest differs between two `user_files` records."""
    found = [(path, "changed") for path in new if path in old and new[path] != old[path]]
    found += [(path, "added") for path in new if path not in old]
    return found + [(path, "removed") for path in old if path not in new]


def _settings(path: Path) -> dict[str, Any]:
    manifest_path = manifest_of(path)
    if manifest_path is None:
        return {}
    manifest = read_manifest(manifest_path, "the setups cannot be compared")
    return _mapping(manifest.get("settings"))


def _short(digest: Any) -> str:
    return printable(str(digest))[:12] if digest is not None else "none"


def _checkpoint_hashes(manifest: dict[str, Any]) -> list[str | None] | None:
    """The weights of a sweep over several checkpoints, one sha256 each, in the sweep's order."""
    listed = manifest.get("checkpoints")
    if not isinstance(listed, list) or len(listed) < 2:
        return None
    return [_mapping(c).get("sha256") for c in listed]


def differences(new: dict[str, Any], baseline: dict[str, Any]) -> list[str]:
    """What differs between two setups, in words: `model options: hidden 32 vs 8` (new first)."""
    found: list[str] = []
    for key in new:
        a, b = new[key], baseline.get(key)
        if _canonical(a) == _canonical(b) or (key == "model options" and found and found[0].startswith("model:")):
            continue  # another model's options are bound to differ: the model says it
        if isinstance(a, dict) and isinstance(b, dict):
            keys = [k for k in dict.fromkeys([*a, *b]) if _canonical(a.get(k)) != _canonical(b.get(k))]
            found.append(f"{key}: " + ", ".join(f"{k} {_shown(a.get(k))} vs {_shown(b.get(k))}" for k in keys))
        else:
            found.append(f"{key}: {_shown(a)} vs {_shown(b)}")
    return found


def _mapping(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _shown(value: Any) -> str:
    text = (
        "none" if value is None else json.dumps(value, default=str) if isinstance(value, (list, dict)) else str(value)
    )
    text = printable(text)
    return text if len(text) <= 80 else text[:77] + "..."
