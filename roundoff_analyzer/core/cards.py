"""What a device does with each dtype, written once: from which CUDA compute capability a dtype has tensor cores,
and which arithmetic a float32 matrix product runs in under torch's settings. Pure functions over plain values; what
reads them from torch (measuring/environment_columns.py, planning/manifest.py) and what says them (the answer) derive
from these."""

from __future__ import annotations

# The first compute capability whose tensor cores take the dtype: Volta (7.0) brought them for float16, Ampere (8.0)
# for bfloat16 (and TF32). Before it, torch still computes in the dtype, without them.
TENSOR_CORES_FROM: dict[str, tuple[int, int]] = {"float16": (7, 0), "bfloat16": (8, 0)}

# What torch.set_float32_matmul_precision means for a float32 matrix product on the CPU (oneDNN): "high" allows TF32,
# "medium" bfloat16; "highest" keeps IEEE float32.
_CPU_MATMUL = {"highest": "ieee", "high": "tf32", "medium": "bf16"}


def capability(text: str) -> tuple[int, int]:
    """'7.5' as (7, 5), as the manifest and the rows write a compute capability."""
    major, _, minor = text.partition(".")
    return int(major), int(minor or 0)


def tensor_cores(compute_capability: str) -> dict[str, bool]:
    """Per dtype, whether a card of this compute capability has tensor cores for it."""
    have = capability(compute_capability)
    return {dtype: have >= first for dtype, first in TENSOR_CORES_FROM.items()}


def first_capability(dtype: str) -> str | None:
    """The first compute capability with tensor cores for `dtype` ('8.0'); None for a dtype tensor cores do not
    name here."""
    first = TENSOR_CORES_FROM.get(dtype)
    return None if first is None else f"{first[0]}.{first[1]}"


def float32_matmul(device_type: str, precision: str, allow_tf32: bool = False) -> str:
    """The arithmetic a float32 matrix product runs in: 'ieee', or on CUDA 'tf32' where TF32 is allowed (by
    `torch.backends.cuda.matmul.allow_tf32`, or a `torch.get_float32_matmul_precision()` other than 'highest'), on
    the CPU what that precision allows ('tf32' for 'high', 'bf16' for 'medium')."""
    if device_type == "cuda":
        return "tf32" if allow_tf32 or precision != "highest" else "ieee"
    return _CPU_MATMUL.get(precision, precision)
