"""How much memory a device has, and how a size is written."""

from __future__ import annotations

import os

import torch


def capacity_bytes(device: torch.device) -> int | None:
    """All the memory of `device` (physical memory for the CPU), or None where it cannot be told."""
    try:
        if device.type == "cuda":
            return torch.cuda.get_device_properties(device.index or 0).total_memory
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError, RuntimeError, AssertionError):
        return None


def gigabytes(n_bytes: float) -> str:
    return f"{n_bytes / 1e9:.3g} GB"
