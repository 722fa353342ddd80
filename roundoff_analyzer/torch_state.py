"""PyTorch's per-process switches (autocast per device, grad mode), put back after a run.

A time limit ends a run with an exception raised wherever the alarm lands, possibly inside
`torch.autocast.__enter__` after it switched autocast on, where no `__exit__` will switch it off:
every later run in the process would then be silently autocast (the float32 and float64 ones too).
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch

DEVICE_TYPES = ("cpu", "cuda")


@contextmanager
def restored_torch_state() -> Iterator[None]:
    autocast = {device: (torch.is_autocast_enabled(device), torch.get_autocast_dtype(device)) for device in DEVICE_TYPES}
    grad_enabled = torch.is_grad_enabled()
    try:
        yield
    finally:
        for device, (enabled, dtype) in autocast.items():
            torch.set_autocast_enabled(device, enabled)
            torch.set_autocast_dtype(device, dtype)
        torch.set_grad_enabled(grad_enabled)
        if not any(enabled for enabled, _ in autocast.values()):
            torch.clear_autocast_cache()  # casts a cut-short run left cached
