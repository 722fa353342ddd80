"""Trained weights from a checkpoint file, loaded without executing code from it.

`torch.load(..., weights_only=True)` unpickles tensors and plain containers only. The state dict
may be the file itself or sit under one of the keys training scripts commonly use.
"""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from ...core.errors import InputError, one_line

NESTING_KEYS = ("state_dict", "model_state_dict", "func_state_dict")
_SHOWN = 5  # names listed in a mismatch message before "and N more"


def load_checkpoint(func: torch.nn.Module, path: str | Path, model: str) -> dict[str, str]:
    """Copy the file's weights into `func`; returns what the manifest records about the file."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"checkpoint '{path}' is a folder; give the path of a weights file (a saved state dict)")
    if not path.is_file():
        raise InputError(f"checkpoint '{path}' does not exist")
    try:
        with (
            warnings.catch_warnings()
        ):  # torch warns about a plain pickle's protocol before refusing it: the refusal says enough
            warnings.simplefilter("ignore")
            content = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - whatever the unpickler refuses, the file is bad input
        reason = _reason(exc)
        raise InputError(
            f"checkpoint '{path}' is not a weights file that loads without running code from it ({reason})"
        ) from None
    state = _state_dict(content, path)
    _check_fits(state, func.state_dict(), path, model)
    with torch.no_grad():
        func.load_state_dict(state)
    return {"path": str(path.resolve()), "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}


def _reason(exc: Exception) -> str:
    # torch's message is a page of advice; the cause is the first sentence after "WeightsUnpickler error:".
    _, marker, cause = str(exc).partition("WeightsUnpickler error:")
    if not marker:
        return one_line(exc) if str(exc).strip() else f"{type(exc).__name__}: empty or truncated file"
    first = next((line.strip() for line in cause.splitlines() if line.strip()), "")
    return f"{type(exc).__name__}: {first.split('. ')[0]}"


def _state_dict(content: Any, path: Path) -> Mapping[str, torch.Tensor]:
    if isinstance(content, Mapping):
        for key in NESTING_KEYS:
            if isinstance(content.get(key), Mapping):
                content = content[key]
                break
        if content and all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in content.items()):
            return content
    raise InputError(
        f"checkpoint '{path}' holds no state dict: expected a mapping of parameter names to tensors, "
        f"bare or under one of {', '.join(NESTING_KEYS)}"
    )


def _check_fits(
    state: Mapping[str, torch.Tensor], expected: Mapping[str, torch.Tensor], path: Path, model: str
) -> None:
    problems = []
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    reshaped = [
        f"{k} {tuple(state[k].shape)} vs {tuple(v.shape)}"
        for k, v in expected.items()
        if k in state and state[k].shape != v.shape
    ]
    for what, names in (("missing", missing), ("not in the model", unexpected), ("shape in file vs model", reshaped)):
        if names:
            more = f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else ""
            problems.append(f"{what}: {', '.join(names[:_SHOWN])}{more}")
    if problems:
        raise InputError(f"checkpoint '{path}' does not fit model {model} with these options ({'; '.join(problems)})")
