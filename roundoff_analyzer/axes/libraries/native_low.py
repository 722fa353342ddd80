from ...solvers import native
from .base import LIBRARIES
from .native import NativeLibrary


class NativeLowTrajectoryLibrary(NativeLibrary):
    """The native solver, returning its stored low-precision states as the trajectory, as rampde does.

    Against `native`: no float32 copy of the trajectory is held (in float16 a third of the trajectory's
    memory), but the loss sees the states rounded to the low dtype and its gradient with respect to them
    arrives in the low dtype. A sweep over both measures what that costs in accuracy.
    """

    name = "native-low"
    returns_low_trajectory = True
    description = (
        "the native solver returning its stored low-precision states as the trajectory, as rampde does "
        "(less memory; the loss sees rounded states)"
    )

    def solve(self, func, y0, t, method, scaler, report):
        return native.odeint(
            func, y0, t, method, scaler=scaler, report=report, trajectory_dtype="low", checkpoint=self.checkpoint
        )


LIBRARIES.register(NativeLowTrajectoryLibrary())
