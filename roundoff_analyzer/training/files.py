"""What a training writes in a setup's folder: checkpoints (weights + a small JSON beside each) and the resume state.

A setup's folder is the training's folder for the first setup and `setups/<label>` for the others; each has
`checkpoints/iter_<iteration:07d>.pt` (the ODE function's state dict, float32, loadable with
`torch.load(..., weights_only=True)` and `--checkpoint`) with `iter_<iteration:07d>.json` beside it, and
`resume/state.pt` (weights, the optimizer's state, the loss scale, the compensation buffers and stochastic-rounding
stream of low-precision weights, the log so far), never under `checkpoints/`.
Every file is written through a temporary and renamed into place, so a killed run leaves whole files only.
"""

from __future__ import annotations

import io
import json
import warnings
from pathlib import Path
from typing import Any

import torch

from ..core.errors import InputError, one_line
from ..storage.results import atomic_write_bytes

CHECKPOINTS = "checkpoints"
RESUME = Path("resume") / "state.pt"


def checkpoint_path(folder: Path, iteration: int) -> Path:
    return Path(folder) / CHECKPOINTS / f"iter_{iteration:07d}.pt"


def _tensor_bytes(content: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(content, buffer)
    return buffer.getvalue()


def save_checkpoint(folder: Path, iteration: int, func: torch.nn.Module, metadata: dict) -> Path:
    path = checkpoint_path(folder, iteration)
    path.parent.mkdir(parents=True, exist_ok=True)
    weights = {name: tensor.detach().to("cpu", copy=True) for name, tensor in func.state_dict().items()}
    atomic_write_bytes(path, _tensor_bytes(weights))
    atomic_write_bytes(path.with_suffix(".json"), (json.dumps(metadata, indent=1) + "\n").encode())
    return path


def save_resume(folder: Path, state: dict) -> None:
    path = Path(folder) / RESUME
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, _tensor_bytes(state))


def load_resume(folder: Path) -> dict | None:
    """The last resume state saved in `folder`, or None; loaded without running code from it."""
    path = Path(folder) / RESUME
    if not path.is_file():
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - a damaged file is the folder's problem, said in one line
        raise InputError(
            f"resume state '{path}' cannot be read ({one_line(exc)}); use --force to train again from the start"
        ) from None
