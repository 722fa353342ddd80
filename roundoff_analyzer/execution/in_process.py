"""Measuring configurations in the current process: the loop every executor ends up running somewhere."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..axes.grid import Configuration, file_safe
from ..axes.libraries import LIBRARIES
from ..axes.methods import METHODS, tableau_of
from ..axes.modes import ProblemCopies
from ..measuring.discretisation import FINE_LIBRARY, FINE_TABLEAU
from ..measuring.measure import forward_families, measure_configurations
from ..measuring.references import ReferenceCache, decide_draws
from ..measuring.run_inputs import SweepShared
from ..measuring.yardstick_files import YARDSTICKS, YardstickFiles, yardstick_key
from ..measuring.yardsticks import PIECES, Yardsticks
from ..planning.sweep_plan import SweepPlan
from ..storage.results import ResultStore


def process_yardsticks(
    plan: SweepPlan, copies: ProblemCopies, store: ResultStore, key: tuple[str, int] = ("", 0)
) -> Yardsticks:
    """The yardsticks of this process (of one problem's: a checkpoint's, a seed's), made once per process: their pieces
    are shared through the folder, each checkpoint's and each seed's in a folder of its own."""
    timesteps, noise_batches = list(plan.grid.timesteps), plan.config.noise_batches
    checkpoint, seed = key
    batch_size = plan.noise_batch_size(checkpoint)
    folder = store.root / YARDSTICKS / file_safe(checkpoint) if checkpoint else store.root / YARDSTICKS
    several_seeds = len(plan.grid.seeds) > 1
    if several_seeds:
        folder = folder / f"seed{seed}"
    key_text = yardstick_key(
        store.digest, timesteps, noise_batches, checkpoint, batch_size, seed if several_seeds else None
    )
    files = YardstickFiles(folder, key_text, plan.device)
    return Yardsticks(
        copies,
        timesteps,
        noise_batches,
        plan.device,
        files,
        plan.shape.state_values,
        batch_size or plan.shape.batch_size,
        coarsest_is=fine_quarter_reference(plan),
        draws=plan.shape.draws,
    )


def fine_quarter_reference(plan: SweepPlan) -> tuple[str, str] | None:
    """(library, method) of the sweep's configurations whose float64 reference at the largest n_timesteps is the fine
    reference's own solve at its quarter density, where the grids agree: the native solver's classical RK4."""
    largest = max(plan.grid.timesteps)
    native = LIBRARIES.get(FINE_LIBRARY)
    for config in plan.configurations:
        if (
            config.library == FINE_LIBRARY
            and config.n_timesteps == largest
            and tableau_of(native, METHODS.get(config.method)) == FINE_TABLEAU
        ):
            return config.library, config.method
    return None


def yardstick_reference(plan: SweepPlan) -> tuple[str, str, int] | None:
    """(library, method, n_timesteps) of the configurations whose float64 reference the yardsticks solve
    (`fine_quarter_reference`), for planning's estimate of what each group costs (planning/groups.py)."""
    pair = fine_quarter_reference(plan)
    return None if pair is None else (*pair, max(plan.grid.timesteps))


@dataclass
class ProcessProblems:
    """Made once per process, for each problem of the sweep (each checkpoint's, each seed's): its cast copies and its
    yardsticks."""

    copies: dict[tuple[str, int], ProblemCopies]
    yardsticks: dict[tuple[str, int], Yardsticks]
    # The scale hints found so far in this process, per problem: a later group's search starts from its last run's.
    scale_hints: dict[tuple[str, int], dict] = field(default_factory=dict)

    @classmethod
    def of(cls, plan: SweepPlan, store: ResultStore) -> ProcessProblems:
        record = plan.shape.solve_of_record
        copies = {key: ProblemCopies(plan.problem_for(key), solve_of_record=record) for key in plan.problem_keys()}
        return cls(copies, {key: process_yardsticks(plan, c, store, key) for key, c in copies.items()})

    def shared(self, plan: SweepPlan, key: tuple[str, int]) -> SweepShared:
        self._decide_draws(key)
        shared = sweep_shared(plan, self.copies[key], self.yardsticks[key], key[0])
        shared.scale_hints = self.scale_hints.setdefault(key, {})
        return shared

    def prepare(self, task: tuple[tuple[str, int], str]) -> None:
        """Compute (or read) one piece of one problem's yardsticks: a task of `yardstick_tasks`."""
        key, piece = task
        self._decide_draws(key)
        self.yardsticks[key].prepare(piece)

    def _decide_draws(self, key: tuple[str, int]) -> None:
        # Before the problem's first run in this process, which would otherwise watch its whole backward (draws.py).
        decide_draws(self.copies[key], self.yardsticks[key].timesteps)


def yardstick_tasks(plan: SweepPlan) -> list[tuple[tuple[str, int], str]]:
    """(problem key, piece) for every piece of the sweep's yardsticks, for the processes to compute side by side."""
    return [(key, piece) for key in plan.problem_keys() for piece in PIECES]


def sweep_shared(plan: SweepPlan, copies: ProblemCopies, yardsticks: Yardsticks, checkpoint: str = "") -> SweepShared:
    """A fresh reference cache over one problem of the plan (a checkpoint's, a seed's), its cast copies and its
    yardsticks (made once per process): references, fine reference and gradient noise are each problem's own."""
    config = plan.config
    step_control = {"rtol": config.rtol, "atol": config.atol, "max_steps": config.max_steps}
    return SweepShared(
        copies,
        ReferenceCache(copies, config.scaler, yardsticks.reference),
        plan.device,
        config.scaler,
        plan.shape,
        config.repeats,
        config.timeout,
        step_control=step_control,
        yardsticks=yardsticks,
        fp8_scaling=config.fp8_scaling,
        cpu_memory=config.cpu_memory,
        train_iteration=plan.train_iteration(checkpoint),
        per_module=config.per_module,
    )


def by_problem(configurations: list[Configuration]) -> dict[tuple[str, int], list[Configuration]]:
    """The configurations of each problem (checkpoint, seed), in the order given."""
    groups: dict[tuple[str, int], list[Configuration]] = {}
    for config in configurations:
        groups.setdefault(config.problem_key, []).append(config)
    return groups


def measure_in_process(
    configurations: list[Configuration],
    shared: SweepShared,
    store: ResultStore,
    begin: Callable[[Configuration], None],
    finish: Callable[[Configuration, dict], None],
    stop_requested: Callable[[], bool],
) -> bool:
    """Measure the configurations, a family at a time (those differing in their scaling only share each run's forward:
    measuring/measure.py), and write each one's shard (atomically) before the next family; False when
    `stop_requested` (asked between families) stopped it early. A KeyboardInterrupt drops the family in progress: its
    shards were never written, so a resume runs it."""
    for family in forward_families(configurations, shared.timeout_s):
        if stop_requested():
            return False
        for config in family:
            begin(config)
        for config, measurement in zip(family, measure_configurations(family, shared), strict=True):
            store.write(config, measurement)
            finish(config, measurement.row)
    return True
