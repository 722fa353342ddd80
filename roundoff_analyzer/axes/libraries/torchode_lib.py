import torchode
from torchode.interpolation import LinearInterpolation
from torchode.single_step_methods.runge_kutta import ButcherTableau, ExplicitRungeKutta
from torchode.status_codes import REACHED_MAX_STEPS, Status

from ..methods import AdaptiveRK, Method
from .base import LibraryAdapter
from .handed import odeint_of
from .steps import exhausted


class _GridRungeKutta(ExplicitRungeKutta):
    """torchode's generic explicit Runge-Kutta, for a fixed-step tableau without an error estimate.

    torchode reads the solution at the output times through the method's interpolation, which its generic
    method leaves out; on a fixed grid every output time is the end of a step, where the linear
    interpolation between the step's two ends gives the step's own result.
    """

    def __init__(self, term, method):
        a = [list(row) for row in method.a]
        super().__init__(
            term, ButcherTableau.from_lists(c=list(method.c), a=a, b=list(method.b), b_err=[0.0] * method.n_stages)
        )

    def convergence_order(self):
        return 1  # read only by adaptive controllers; this method runs under torchode's fixed-step controller

    def build_interpolation(self, data):
        return LinearInterpolation(data.t0, data.dt, data.y0, data.y1)


class TorchodeLibrary:
    name = "torchode"
    import_line = "from roundoff_analyzer.axes.libraries.torchode_lib import odeint  # torchode, as swept"
    supports_adjoint_scaling = False

    def unsupported_method_reason(self, method: Method) -> str | None:
        if method.adaptive and method.name not in ("dopri5", "tsit5"):
            return f"torchode has no adaptive method '{method.name}'"
        return None

    def solve(self, func, y0, t, method, scaler, report):
        shape = y0.shape
        # torchode solves a batch of independent problems, each with its own step size; one flat row keeps
        # one step size for the whole state, as the other libraries do.
        term = torchode.ODETerm(lambda s, y: func(s[0], y.reshape(shape)).reshape(1, -1))
        if isinstance(method, AdaptiveRK):
            stepper = torchode.Dopri5(term) if method.name == "dopri5" else torchode.Tsit5(term)
            controller = torchode.IntegralController(atol=method.atol, rtol=method.rtol, term=term)
            # torchode flags the budget once `max_steps` steps were attempted; one more lets a solve that needs exactly
            # `max_steps` finish, as with the other libraries.
            # Gradients through the solution, not through the step-size choice (as torchdiffeq's adaptive solvers).
            solver = torchode.AutoDiffAdjoint(
                stepper, controller, max_steps=method.max_steps + 1, backprop_through_step_size_control=False
            )
            dt0 = None
        else:
            stepper = torchode.Euler(term) if method.name == "euler" else _GridRungeKutta(term, method)
            solver, dt0 = (
                torchode.AutoDiffAdjoint(stepper, torchode.FixedStepController()),
                ((t[-1] - t[0]) / (t.numel() - 1)).reshape(1),
            )
        problem = torchode.InitialValueProblem(y0=y0.reshape(1, -1), t_eval=t.reshape(1, -1))
        solution = solver.solve(problem, dt0=dt0)
        steps, accepted = int(solution.stats["n_steps"]), int(solution.stats["n_accepted"])
        if isinstance(method, AdaptiveRK):
            report.record_steps(accepted, steps - accepted)
        status = int(solution.status)
        if int(solution.stats["n_initialized"]) < t.numel():
            if status == REACHED_MAX_STEPS and isinstance(method, AdaptiveRK):
                raise exhausted(self.name, steps, method.max_steps)
            raise RuntimeError(f"torchode stopped with status {Status(status).name} after {steps} steps")
        return solution.ys.reshape(t.numel(), *shape)


LIBRARY: LibraryAdapter = TorchodeLibrary()
# torchdiffeq's signature, solving as the runs did: what the answer's code imports (`import_line`).
odeint = odeint_of(LIBRARY)
