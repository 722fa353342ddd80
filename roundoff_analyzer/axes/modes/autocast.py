import torch

from ..models.inputs import as_leaves
from .base import MODES, Mode, PreparedRun, run_device


class AutocastMode(Mode):
    name = "autocast"
    description = "float32 parameters and inputs; the forward runs under torch.autocast in the low dtype"
    # With its cache on, autocast casts each weight once per autocast region and reuses that copy for the whole solve.
    cache_enabled = True

    def prepare(self, copies, dtype):
        batch = as_leaves(copies.batch, copies.differentiates_batch)
        device_type = run_device(copies.model, batch).type
        # float32 needs no autocast: the run is then plain single precision.
        enabled = dtype != torch.float32
        cache = self.cache_enabled
        return PreparedRun(
            copies.model,
            batch,
            lambda: torch.autocast(device_type, dtype=dtype, enabled=enabled, cache_enabled=cache),
            # Each step's share is computed in the low dtype; its cache sums them on its one low-precision copy of
            # the weight, without it the cast's backward hands each to the float32 weight, summed there.
            weight_gradient_dtypes=(dtype, dtype if cache else torch.float32),
        )


MODES.register(AutocastMode())
