"""The native mixed-precision solver, public: `odeint`, a drop-in for torchdiffeq's fixed-grid `odeint` whose backward
runs the discrete adjoint in the low precision of the forward, `odeint_adjoint`, the same behind torchdiffeq's
`odeint_adjoint` call, and `DynamicAdjointScaler`, the scale that keeps that adjoint in range.

    from roundoff_analyzer.solvers import DynamicAdjointScaler, odeint
    with torch.autocast("cuda", dtype=torch.float16):
        states = odeint(func, y0, t, method="rk4_classical", scaler=DynamicAdjointScaler())

`answered_by(odeint, ...)` answers, within its block, every call of torchdiffeq's `odeint` and `odeint_adjoint` that a
model makes itself (in its own modules or inside a package such as torchcde) with the solver, method and grid given, so
code that calls torchdiffeq solves as measured unedited. `equal_steps(n)` is the `grid_constructor` option for n equal
steps across each solve's span (what a sweep's n_timesteps means for a model given as a training step), `SolveReport`
records each step's magnitudes (`report=`), `increment` is one explicit Runge-Kutta step as the solver forms it, and
`TableauWarning`, deprecated and no longer raised, is what `method="rk4"` warned while it meant the classical rule here
(it is now torchdiffeq's rk4, the 3/8 rule; the classical rule is "rk4_classical").
"""

from .adjoint import odeint_adjoint
from .drop_in import TableauWarning, odeint
from .grid_output import equal_steps
from .native import increment
from .scaler import DynamicAdjointScaler
from .step_magnitudes import SolveReport, StepRecord
from .torchdiffeq_calls import answered_by

__all__ = [
    "odeint",
    "odeint_adjoint",
    "answered_by",
    "equal_steps",
    "increment",
    "DynamicAdjointScaler",
    "SolveReport",
    "StepRecord",
    "TableauWarning",
]
