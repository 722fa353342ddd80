from ...solvers import native
from .base import LIBRARIES, SolverLibrary


class NativeLibrary(SolverLibrary):
    name = "native"
    # How a training script solves as this library does (native-low too: the trajectory dtype is an argument).
    import_line = "from roundoff_analyzer.solvers import odeint  # in place of torchdiffeq's odeint"
    description = (
        "this project's mixed-precision solver: low-precision stored states, hand-written backward, dynamic "
        "adjoint scaling"
    )
    supports_adjoint_scaling = True
    native_solver = True
    # The backward a sweep measures: the drop-in's default, which the answer's code hands out (the roundoff is the
    # user's); the report's `checkpoint` says which ran.
    checkpoint: native.Checkpoint = "auto"

    def unsupported_method_reason(self, method):
        if method.adaptive:
            return f"the native solver steps on the fixed grid only; '{method.name}' is adaptive"
        return None

    def solve(self, func, y0, t, method, scaler, report):
        return native.odeint(func, y0, t, method, scaler=scaler, report=report, checkpoint=self.checkpoint)


LIBRARIES.register(NativeLibrary())
