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
    """One line naming the user's code (a `file.py:factory` model, a `--library file.py:object` plug-in) whose file
    differs between the two sweeps, by the SHA-256 each manifest recorded (None when none does): the same name then
    ran other code, which a comparison of the errors should say. An unreadable manifest is an InputError."""
    new, old = _user_code(results), _user_code(baseline)
    changed = [spec for spec in new if spec in old and new[spec] != old[spec]]
    if not changed:
        return None
    files = "; ".join(
        f"{spec} (sha256 {_short(new[spec])} now, {_short(old[spec])} in the baseline)" for spec in changed
    )
    return f"the code differs from the baseline's: {files}; the errors are compared across that change"


def _user_code(path: Path) -> dict[str, Any]:
    manifest_path = manifest_of(path)
    if manifest_path is None:
        return {}
    manifest = read_manifest(manifest_path, "the setups cannot be compared")
    return _mapping(_mapping(manifest.get("settings")).get("user_code"))


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
