import torch

from .base import MODES, PreparedRun


class AutocastMode:
    name = "autocast"
    description = "float32 parameters and inputs; the forward runs under torch.autocast in the low dtype"
    # With its cache on, autocast casts each weight once per autocast region and reuses that copy for the whole solve.
    cache_enabled = True

    def prepare(self, copies, dtype):
        problem = copies.problem
        y0 = problem.y0.detach().clone().requires_grad_(True)
        device_type = y0.device.type
        # float32 needs no autocast: the run is then plain single precision.
        enabled = dtype != torch.float32
        cache = self.cache_enabled
        return PreparedRun(
            problem.func, y0, lambda: torch.autocast(device_type, dtype=dtype, enabled=enabled, cache_enabled=cache)
        )


MODES.register(AutocastMode())
