"""PyTorch's per-process switches (autocast per device, grad mode), and torchdiffeq's names a step's routing set, put
back after a run.

A time limit ends a run with an exception raised wherever the alarm lands, possibly inside
`torch.autocast.__enter__` after it switched autocast on, where no `__exit__` will switch it off:
every later run in the process would then be silently autocast (the float32 and float64 ones too).
It also leaves autocast's nesting count one up, so that no later region ever closes the outermost one
and its cache of weight casts is never cleared: weights updated in place (training in the same process)
would then be cast from stale copies. Both are put back. An alarm landing where a context manager's lines run (entering
or leaving the routing of torchdiffeq's names) leaves no `finally` of its own to run: the names are given back here.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from .torchdiffeq_routing import give_back

DEVICE_TYPES = ("cpu", "cuda")


def autocast_nesting() -> int:
    """How many autocast regions are open in this thread (torch has no getter: one up and one down tells)."""
    torch.autocast_increment_nesting()
    return torch.autocast_decrement_nesting()


@contextmanager
def restored_torch_state() -> Iterator[None]:
    autocast = {
        device: (torch.is_autocast_enabled(device), torch.get_autocast_dtype(device)) for device in DEVICE_TYPES
    }
    grad_enabled, nesting = torch.is_grad_enabled(), autocast_nesting()
    try:
        yield
    finally:
        while autocast_nesting() > nesting:
            torch.autocast_decrement_nesting()
        for device, (enabled, dtype) in autocast.items():
            torch.set_autocast_enabled(device, enabled)
            torch.set_autocast_dtype(device, dtype)
        torch.set_grad_enabled(grad_enabled)
        give_back()
        if not any(enabled for enabled, _ in autocast.values()):
            torch.clear_autocast_cache()  # casts a cut-short run left cached
