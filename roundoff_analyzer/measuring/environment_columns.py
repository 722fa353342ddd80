"""The environment a row was measured in, as columns of the row: the torch version, the device's name (the CPU model,
or the GPU's name), the GPU's compute capability and the arithmetic of a float32 matrix product (`ieee`, or `tf32` where
TF32 was allowed: a float32 run under TF32 is not a float32 run). Bits may differ across CPUs, GPUs, torch versions
and these settings, so a folder resumed elsewhere, or a Slurm sweep over mixed nodes, keeps in each row where it came
from."""

from __future__ import annotations

import functools
import platform
from pathlib import Path

import torch

from ..core.cards import float32_matmul, tensor_cores

ENVIRONMENT_COLUMNS = ("torch_version", "device_name", "compute_capability", "float32_matmul")


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


def float32_matmul_now(device_type: str) -> str:
    """The arithmetic a float32 matrix product on this device type runs in under torch's settings now: read each time,
    as a script may allow TF32 between two runs."""
    return float32_matmul(device_type, torch.get_float32_matmul_precision(), torch.backends.cuda.matmul.allow_tf32)


def environment_columns(device: torch.device) -> dict[str, str | None]:
    """The row's environment columns for a run on `device` in this process."""
    return dict(zip(ENVIRONMENT_COLUMNS, (*_environment(device.type, device.index), float32_matmul_now(device.type))))


def device_details(device: torch.device) -> dict[str, object]:
    """The manifest's record of the device as the sweep starts: its name; on CUDA its compute capability, which low
    dtypes its tensor cores take, whether torch calls bfloat16 supported, and the TF32 switches of matmul and cuDNN;
    and the float32 matmul precision with the arithmetic it gives."""
    _, name, compute_capability = _environment(device.type, device.index)
    record: dict[str, object] = {"type": device.type, "name": name}
    if device.type == "cuda":
        assert compute_capability is not None  # _environment reads it on CUDA
        record.update(
            compute_capability=compute_capability,
            tensor_cores=tensor_cores(compute_capability),
            bf16_supported=torch.cuda.is_bf16_supported(),
            matmul_allow_tf32=torch.backends.cuda.matmul.allow_tf32,
            cudnn_allow_tf32=torch.backends.cudnn.allow_tf32,
        )
    record.update(
        float32_matmul_precision=torch.get_float32_matmul_precision(), float32_matmul=float32_matmul_now(device.type)
    )
    return record
