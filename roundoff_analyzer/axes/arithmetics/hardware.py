from .base import ARITHMETICS, Arithmetic


class Hardware(Arithmetic):
    name = "hardware"
    description = "the device's own arithmetic in torch's dtype (default for float16, bfloat16, float32)"
    # Nothing of a run's own runs from its forward into its backward: runs differing in their scaling share a forward.
    shares_forward = True

    def skip_reason(self, dtype, rounding):
        if rounding != "nearest":
            return f"{rounding} rounding needs --arithmetic emulated; hardware rounds to nearest"
        return None

    def unsupported_reason(self, dtype, device):
        return dtype.unsupported_reason(device)

    def prepare(self, mode, copies, dtype, request):
        return mode.prepare(copies, dtype.torch_dtype)


ARITHMETICS.register(Hardware())
