"""Measuring configurations in the current process: the loop every executor ends up running somewhere."""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from ..grid import Configuration
from ..measure import ReferenceCache, SweepContext, measure_configuration
from ..modes import ProblemCopies
from ..results import ResultStore
from ..yardsticks import Yardsticks

if TYPE_CHECKING:
    from ..sweep import SweepPlan


def sweep_context(plan: "SweepPlan", copies: ProblemCopies | None = None, checkpoint: str = "") -> SweepContext:
    """A fresh reference cache over the problem of one checkpoint of the plan (and its cast copies, when given, made
    once per process): references, fine reference and gradient noise are each checkpoint's own."""
    copies = copies or ProblemCopies(plan.problem_for(checkpoint))
    config = plan.config
    step_control = {"rtol": config.rtol, "atol": config.atol, "max_steps": config.max_steps}
    yardsticks = Yardsticks(copies, list(plan.grid.timesteps), config.noise_batches, plan.device)
    return SweepContext(
        copies, ReferenceCache(copies, config.scaler), plan.device, config.scaler, config.repeats, config.timeout,
        step_control=step_control, yardsticks=yardsticks, fp8_scaling=config.fp8_scaling, cpu_memory=config.cpu_memory,
        train_iteration=plan.train_iteration(checkpoint),
    )


def by_checkpoint(configurations: list[Configuration]) -> dict[str, list[Configuration]]:
    """The configurations of each checkpoint, in the order given."""
    groups: dict[str, list[Configuration]] = {}
    for config in configurations:
        groups.setdefault(config.checkpoint, []).append(config)
    return groups


def measure_in_process(
    configurations: list[Configuration],
    context: SweepContext,
    store: ResultStore,
    begin: Callable[[Configuration], None],
    finish: Callable[[Configuration, dict], None],
    stop_requested: Callable[[], bool],
) -> bool:
    """Measure each configuration and write its shard (atomically) before the next; False when
    `stop_requested` (asked between configurations) stopped it early. A KeyboardInterrupt drops the
    configuration in progress: its shard was never written, so a resume runs it."""
    for config in configurations:
        if stop_requested():
            return False
        begin(config)
        measurement = measure_configuration(config, context)
        store.write(config, measurement)
        finish(config, measurement.row)
    return True
