from ...solvers import native
from .base import LIBRARIES


class NativeLibrary:
    name = "native"
    description = (
        "this project's mixed-precision solver: low-precision stored states, hand-written backward, dynamic "
        "adjoint scaling"
    )
    supports_adjoint_scaling = True

    def unsupported_method_reason(self, method):
        if method.adaptive:
            return f"the native solver steps on the fixed grid only; '{method.name}' is adaptive"
        return None

    def solve(self, func, y0, t, method, scaler, report):
        return native.odeint(func, y0, t, method, scaler=scaler, report=report)


LIBRARIES.register(NativeLibrary())
