"""What roundoff is set against: the discretisation error (via the fine reference) and the gradient noise.

Both are computed once per sweep, in pieces that the processes of a sweep share through the results folder
(yardstick_files.py), and turned into row columns by `context_columns`, a pure function of a run, its
float64 reference, the fine reference and the noise.
"""

from __future__ import annotations

import time

import torch

from ..axes.libraries import LIBRARIES, SolverLibrary
from ..axes.methods import METHODS, Method
from ..axes.modes import ProblemCopies
from ..axes.scalings import ScalerSettings
from ..core.errors import one_line
from . import failures, metrics
from .discretisation import (
    COARSENINGS,
    FineReference,
    FineSolution,
    combine_fine,
    fine_from_reference,
    fine_steps,
    solve_on_fine_grid,
    solve_step_on_fine_grid,
)
from .draws import grows_with_steps
from .gradient_noise import NOISE_TIMESTEPS, GradientNoise, batch_gradients, noise_from, problem_batch_size
from .memory import fine_reference_oom
from .one_run import RunOutcome
from .outcome_records import outcome_from_record, outcome_record
from .references import ReferenceCache
from .yardstick_files import YardstickFiles

DRAWS_GROW_WITH_STEPS = (
    "the step draws more random numbers on a finer grid (a vector field that draws at each evaluation), so its solve "
    "on a finer grid is another random ODE: no fine reference solves the same problem"
)

# (error column suffix, what is compared): the errors that get a discretisation twin and a roundoff/disc ratio.
DISC_METRICS = ("sol_rel_err", "final_rel_err", "grad_y0_rel_err", "grad_params_rel_err")


def disc_column(metric: str) -> str:
    return f"disc_{metric}"


def ratio_column(metric: str) -> str:
    return f"{metric.removesuffix('_rel_err')}_roundoff_to_disc"


def total_column(metric: str) -> str:
    return f"total_{metric}"


def fine_error_column(metric: str) -> str:
    """The fine reference's own estimated error in the quantity of `metric` (the solution's is the final state's)."""
    return f"fine_ref_{'final_rel_err' if metric == 'sol_rel_err' else metric}"


def fine_order_column(metric: str) -> str:
    """The order at which the fine reference's three densities converged in the quantity of `metric`."""
    return fine_error_column(metric).replace("_rel_err", "_order")


# The fine reference's self-check estimates, by the metrics they bound.
_FINE_ESTIMATES = {"final_rel_err": "final_state", "grad_y0_rel_err": "grad_y0", "grad_params_rel_err": "grad_params"}

YARDSTICK_COLUMNS = (
    *(disc_column(m) for m in DISC_METRICS),
    *(ratio_column(m) for m in DISC_METRICS),
    *(total_column(m) for m in DISC_METRICS),
    "fine_ref_steps",
    *(fine_error_column(m) for m in _FINE_ESTIMATES),
    *(fine_order_column(m) for m in _FINE_ESTIMATES),
    "fine_ref_interpolated_times",
    "grad_noise_rel",
    "grad_noise_batches",
    "grad_noise_batch_size",
    "grad_noise_uncertainty",
    "roundoff_to_noise",
)
INTEGER_YARDSTICK_COLUMNS = (
    "fine_ref_steps",
    "fine_ref_interpolated_times",
    "grad_noise_batches",
    "grad_noise_batch_size",
)


def with_yardstick_columns(results):
    """`results` with every yardstick column, NaN where missing: a folder from before they were measured still reads."""
    return results.assign(**{c: float("nan") for c in YARDSTICK_COLUMNS if c not in results.columns})


# The gradient noise is computed in this many parts (batch ranges), so that processes can share it.
NOISE_PIECES = 4
# The fine reference's solves by piece name, at each of its densities (the fine one, half and a quarter of it).
FINE_PIECES = dict(zip(("fine", "fine_half", "fine_quarter"), COARSENINGS, strict=True))
_QUARTER = "fine_quarter"
# The pieces of the yardsticks, largest first: processes that share them take them in this order.
PIECES = (*FINE_PIECES, *(f"noise_{i}" for i in range(NOISE_PIECES)))


def noise_piece_batches(n_batches: int, index: int) -> range:
    """The batches (numbered from 1; batch 0 is the sweep's own) whose gradients noise piece `index` computes."""
    per = -(-n_batches // NOISE_PIECES)
    return range(1 + index * per, 1 + min(n_batches, (index + 1) * per))


class Yardsticks:
    """A process's view of the fine reference and the gradient noise: each piece computed on first use, or read
    from `files` where another process of the sweep (or an earlier run of it) saved it."""

    def __init__(
        self,
        copies: ProblemCopies,
        timesteps: list[int],
        noise_batches: int,
        device: torch.device,
        files: YardstickFiles | None = None,
        state_values: int | None = None,
        noise_batch_size: int | None = None,
        coarsest_is: tuple[str, str] | None = None,
        draws: dict | None = None,
    ) -> None:
        self.copies, self.timesteps, self.noise_batches, self.device, self.files = (
            copies,
            list(timesteps),
            noise_batches,
            device,
            files,
        )
        # Elements of the largest state a solve holds (the memory bound of the fine reference); y0's by default.
        self.state_values = state_values if state_values is not None else _state_values(copies)
        # Points per noise batch: the batch the user trains with where the sweep knows it, else the sweep's own.
        self.noise_batch_size = noise_batch_size or problem_batch_size(copies)
        # (library, method) of a configuration of the sweep whose float64 reference at the largest n_timesteps is the
        # fine reference's quarter density, solved once for both where the grids agree (`reference`).
        self.coarsest_is = coarsest_is
        # What the step draws (draws.py's record; None: nothing). One that draws more on a finer grid solves another
        # random ODE there: no fine reference is its.
        self.draws = draws
        self._pieces: dict[str, dict] = {}
        self._fine: FineReference | None = None
        self._noise: GradientNoise | None = None
        self.fine_failure: str | None = None

    def prepare(self, piece: str) -> None:
        """Compute `piece` now (or read it), so that it is ready for this sweep's processes."""
        self._piece(piece)

    def fine(self) -> FineReference | None:
        if self._fine is None and self.fine_failure is None:
            solves = [self._piece(piece) for piece in FINE_PIECES]
            self.fine_failure = next((s["failure"] for s in solves if "failure" in s), None)
            if self.fine_failure is None:
                seconds = sum(s["seconds"] for s in solves)
                fine, half, quarter = (_solutions(s) for s in solves)
                self._fine = combine_fine(fine_steps(self.timesteps), fine, half, quarter, seconds)
        return self._fine

    def noise(self) -> GradientNoise:
        if self._noise is None:
            gradients: list[torch.Tensor] = []
            stopped, seconds = None, 0.0
            for index in range(NOISE_PIECES):
                piece = self._piece(f"noise_{index}")
                seconds += piece["seconds"]
                if "failure" in piece:
                    self._noise = GradientNoise(None, self.noise_batches, self._noise_timesteps(), piece["failure"])
                    return self._noise
                if stopped is None:  # the batches ran out: later pieces found none either
                    gradients += piece["gradients"]
                    stopped = piece["stopped"]
            self._noise = noise_from(
                gradients, stopped, self.noise_batches, self._noise_timesteps(), seconds, self.noise_batch_size
            )
        return self._noise

    def reference(self, library: SolverLibrary, method: Method, n_timesteps: int) -> RunOutcome | None:
        """The float64 reference of the configurations of (`library`, `method`, `n_timesteps`) where the fine
        reference's quarter density solved it (a ReferenceCache's `solved_elsewhere`); None where it did not."""
        if self.coarsest_is != (library.name, method.name) or n_timesteps != max(self.timesteps):
            return None
        record = self._piece(_QUARTER).get("reference")
        return outcome_from_record(record) if record is not None else None

    def _piece(self, piece: str) -> dict:
        if piece not in self._pieces:
            kind, _, index = piece.rpartition("_")
            if kind == "noise":
                compute = lambda: self._noise_piece(int(index))  # noqa: E731
            else:
                compute = lambda: self._solve_fine(FINE_PIECES[piece])  # noqa: E731
            self._pieces[piece] = compute() if self.files is None else self.files.obtain(piece, compute)
        return self._pieces[piece]

    def _solve_fine(self, coarsening: int) -> dict:
        if grows_with_steps(self.draws):
            return {"failure": DRAWS_GROW_WITH_STEPS}
        too_large = fine_reference_oom(self.timesteps, self.state_values, self.device)
        if too_large:  # before the grid is built: its points alone may exceed the machine
            return {"failure": too_large}
        started = time.perf_counter()
        steps = fine_steps(self.timesteps)
        if coarsening == FINE_PIECES[_QUARTER] and self.coarsest_is is not None and self.copies.trajectory is not None:
            shared = self._quarter_from_reference(steps, started)
            if shared is not None:
                return shared
        try:
            if self.copies.trajectory is not None:
                solved = solve_on_fine_grid(
                    self.copies, self.timesteps, steps, self.device, coarsening, self.draws is not None
                )
            else:  # a step's output times are its own: one solve serves every n_timesteps
                step_solution = solve_step_on_fine_grid(self.copies, steps // coarsening, self.device)
                solved = dict.fromkeys(self.timesteps, step_solution)
        except Exception as exc:  # noqa: BLE001 - without it the rows lack the yardstick columns, nothing more
            return {"failure": f"{type(exc).__name__}: {exc}"}
        solutions = {n: _solution_record(s) for n, s in solved.items()}
        return {"solutions": solutions, "seconds": time.perf_counter() - started}

    def _quarter_from_reference(self, steps: int, started: float) -> dict | None:
        """The quarter density as the float64 reference of `coarsest_is` at the largest n_timesteps, solved here and
        kept in the piece for the configurations it is the reference of; None where the two are not the same solve."""
        assert self.coarsest_is is not None
        library, method = LIBRARIES.get(self.coarsest_is[0]), METHODS.get(self.coarsest_is[1])
        # The reference's scaling is `none`, which reads no scaler setting.
        try:
            reference = ReferenceCache(self.copies, ScalerSettings()).get(library, method, max(self.timesteps))
        except failures.ReferenceFailed:
            return None
        solved = fine_from_reference(self.copies, self.timesteps, steps, FINE_PIECES[_QUARTER], reference)
        if solved is None:
            return None
        return {
            "solutions": {n: _solution_record(s) for n, s in solved.items()},
            "seconds": time.perf_counter() - started,
            "reference": outcome_record(reference),
        }

    def _noise_timesteps(self) -> int:
        return min(NOISE_TIMESTEPS, max(self.timesteps))

    def _noise_piece(self, index: int) -> dict:
        started = time.perf_counter()
        batches = noise_piece_batches(self.noise_batches, index)
        try:
            gradients, stopped = batch_gradients(
                self.copies, self._noise_timesteps(), batches, self.device, self.noise_batch_size
            )
        except Exception as exc:  # noqa: BLE001 - a user's batch sampler that fails leaves the noise unknown, no more
            return {
                "failure": f"drawing another batch raised {one_line(exc)}",
                "seconds": time.perf_counter() - started,
            }
        return {"gradients": gradients, "stopped": stopped, "seconds": time.perf_counter() - started}


def _solution_record(solution: FineSolution) -> dict:
    return {
        "trajectory": solution.trajectory,
        "loss": solution.loss,
        "grads": list(solution.grads),
        "n_inputs": solution.n_inputs,
        "interpolated_times": solution.interpolated_times,
    }


def _solutions(piece: dict) -> dict[int, FineSolution]:
    return {
        int(n): FineSolution(
            s["trajectory"], s["loss"], list(s["grads"]), s.get("n_inputs", 1), s.get("interpolated_times")
        )
        for n, s in piece["solutions"].items()
    }


def _state_values(copies: ProblemCopies) -> int:
    trajectory = copies.trajectory
    assert trajectory is not None, "a step's state size is what its contract check saw (ProblemShape)"
    return trajectory.y0.numel()


def _values(solution) -> dict[str, torch.Tensor | None]:
    """The compared quantities of a run, its reference or the fine solution, by error column."""
    trajectory, grads, n_inputs = solution.trajectory, solution.grads, solution.n_inputs
    finite_solution = trajectory is not None and metrics.all_finite([trajectory])
    finite_grads = bool(grads) and metrics.all_finite(grads)
    return {
        "sol_rel_err": trajectory if finite_solution else None,
        "final_rel_err": trajectory[-1] if finite_solution else None,
        "grad_y0_rel_err": metrics.joined(grads[:n_inputs]) if finite_grads else None,
        "grad_params_rel_err": metrics.flatten(grads[n_inputs:]) if finite_grads else None,
    }


def yardstick_columns(
    run, reference, fine: FineReference | None, noise: GradientNoise, n_timesteps: int, errors: dict
) -> dict:
    """Discretisation error of the float64 reference, total error of the run, their ratios to the roundoff
    (`errors`: the run's error against its reference), and the gradient noise: each None where unknown."""
    columns: dict[str, float | int | None] = dict.fromkeys(YARDSTICK_COLUMNS)
    solution: FineSolution | None = fine.at.get(n_timesteps) if fine is not None else None
    if fine is not None and solution is not None:
        columns["fine_ref_steps"] = fine.fine_steps
        columns["fine_ref_interpolated_times"] = fine.interpolated_times
        for metric, estimate in _FINE_ESTIMATES.items():
            columns[fine_error_column(metric)] = fine.estimated_error.get(estimate)
            columns[fine_order_column(metric)] = fine.observed_order.get(estimate)
        exact, of_reference = _values(solution), _values(reference)
        of_run = _values(run) if run is not None else dict.fromkeys(DISC_METRICS)
        for metric in DISC_METRICS:
            reference_value, exact_value, run_value = of_reference[metric], exact[metric], of_run[metric]
            if reference_value is not None and exact_value is not None:
                disc = metrics.rel_err(reference_value, exact_value)
                columns[disc_column(metric)] = disc
                if errors.get(metric) is not None and disc > 0:
                    columns[ratio_column(metric)] = errors[metric] / disc
            if run_value is not None and exact_value is not None:
                columns[total_column(metric)] = metrics.rel_err(run_value, exact_value)
    columns["grad_noise_batches"] = noise.n_batches if noise.rel is not None else None
    columns["grad_noise_batch_size"] = noise.batch_size if noise.rel is not None else None
    columns["grad_noise_uncertainty"] = noise.uncertainty
    columns["grad_noise_rel"] = noise.rel
    if noise.rel and errors.get("grad_params_rel_err") is not None:
        columns["roundoff_to_noise"] = errors["grad_params_rel_err"] / noise.rel
    return columns
