import copy
from dataclasses import replace

import torch

from ...emulation import EmulationSettings, Saturations, emulate
from ..models.inputs import floating_inputs, map_floating
from ..modes import PreparedRun
from .base import ARITHMETICS, Arithmetic, tensor_scaling


class Emulated(Arithmetic):
    name = "emulated"
    # Its rounding stream and its count of saturated values run through a forward into its backward.
    shares_forward = False
    description = (
        "float32 arithmetic rounded to the format wherever the low dtype would hold a value (docs/emulation.md)"
        "; default for fp8 and eXmY formats"
    )

    def skip_reason(self, dtype, rounding):
        return None

    def unsupported_reason(self, dtype, device):
        return None

    def prepare(self, mode, copies, dtype, request):
        settings = EmulationSettings(
            dtype.format,
            request.rounding,
            bool(tensor_scaling(dtype, self.name, request.fp8_scaling)),
            mode.name == "pure",
            request.repeat,
            cache_weights=getattr(mode, "cache_enabled", True),
        )
        # The mode's own preparation in float32 gives the parameters and inputs; the emulation replaces its dtype.
        prepared = mode.prepare(copies, torch.float32)
        device_type = prepared.device.type
        saturations = Saturations()
        if settings.pure:
            prepared = _rounded_copy(prepared, emulate(settings, device_type, saturations))
        return replace(
            prepared, context=lambda: emulate(settings, device_type, saturations), silent_overflow=saturations.first
        )


def _rounded_copy(prepared: PreparedRun, emulation) -> PreparedRun:
    """Pure mode: parameters and inputs hold values of the format (stored in float32)."""
    model = copy.deepcopy(prepared.model)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(emulation.store(parameter))
            emulation.mark(parameter)
        # Stored values are fresh tensors: each is the leaf of its input's gradient where the batch is differentiated.
        batch = map_floating(prepared.batch, lambda value: emulation.store(value).requires_grad_(value.requires_grad))
    for value in floating_inputs(batch):
        emulation.mark(value)
    return PreparedRun(model, batch, prepared.context)


ARITHMETICS.register(Emulated())
