"""Where a sweep runs: resolving `auto`, synchronising clocks, and peak memory where the device reports it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from .errors import InputError

DEVICE_CHOICES = ("auto", "cpu", "cuda")


def parse_device(name: str) -> torch.device:
    """The device a name means, without asking whether this machine has it (for runs on other machines)."""
    try:
        device = torch.device(name)
    except RuntimeError:  # not a device string at all
        device = None
    if device is None or device.type not in ("cpu", "cuda"):
        raise InputError(f"unknown device '{name}'; allowed: {', '.join(DEVICE_CHOICES)} (or cuda:N)")
    return device


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = parse_device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise InputError(f"device '{name}' asked for, but this machine has no CUDA device; use --device cpu or auto")
    return device


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass
class Measured:
    seconds: float = 0.0
    peak_memory_bytes: int | None = None


@contextmanager
def measured(device: torch.device) -> Iterator[Measured]:
    """Wall time of the block (device work included) and, on CUDA, the allocator's peak inside it."""
    result = Measured()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    synchronize(device)
    start = time.perf_counter()
    try:
        yield result
    finally:
        synchronize(device)
        result.seconds = time.perf_counter() - start
        if device.type == "cuda":
            result.peak_memory_bytes = int(torch.cuda.max_memory_allocated(device))


def worker_devices(device: torch.device, n_workers: int) -> list[str]:
    """Worker i on GPU i mod (visible GPUs) when the sweep asks for plain `cuda`;
    otherwise all on the sweep's device."""
    if device.type == "cuda" and device.index is None:
        n_gpus = max(1, torch.cuda.device_count())
        return [f"cuda:{i % n_gpus}" for i in range(n_workers)]
    return [str(device)] * n_workers


def shared_gpu_warning(device: torch.device, n_workers: int) -> str | None:
    """What to say when worker processes share a GPU: they compete for its memory (a run that fits alone can run
    out of it beside another) and for its time (each row's times are not one process's)."""
    if device.type != "cuda" or n_workers < 2:
        return None
    on = worker_devices(device, n_workers)
    most = max(on.count(gpu) for gpu in set(on))
    if most < 2:
        return None
    return (
        f"{most} worker processes share one GPU: they compete for its memory, so a run that fits alone can run out "
        "of it beside another (its row is then oom or skipped where a one-process sweep measures it), and each row's "
        "times are not one process's; on one GPU, --workers 1 measures what the card does alone"
    )


def describe(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    import platform

    return f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"
