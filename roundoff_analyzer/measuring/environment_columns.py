"""The environment a row was measured in, as columns of the row: the torch version, the device's name (the CPU model,
or the GPU's name) and the GPU's compute capability. Bits may differ across CPUs, GPUs and torch versions, so a
folder resumed elsewhere, or a Slurm sweep over mixed nodes, keeps in each row where it came from."""

from __future__ import annotations

import functools
import platform
from pathlib import Path

import torch

ENVIRONMENT_COLUMNS = ("torch_version", "device_name", "compute_capability")


def cpu_model() -> str:
    """The CPU's model name as the kernel reports it (`AMD EPYC 7B13`), else what Python's platform module knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "cpu model") and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


@functools.cache
def _environment(device_type: str, index: int | None) -> tuple[str, str, str | None]:
    if device_type == "cuda":
        device = torch.device("cuda", index or 0)
        major, minor = torch.cuda.get_device_capability(device)
        return torch.__version__, torch.cuda.get_device_name(device), f"{major}.{minor}"
    return torch.__version__, cpu_model(), None


def environment_columns(device: torch.device) -> dict[str, str | None]:
    """The row's environment columns for a run on `device` in this process."""
    return dict(zip(ENVIRONMENT_COLUMNS, _environment(device.type, device.index)))
