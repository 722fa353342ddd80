"""Measuring configurations in the current process: the loop every executor ends up running somewhere."""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from ..grid import Configuration
from ..measure import ReferenceCache, SweepContext, measure_configuration
from ..modes import ProblemCopies
from ..results import ResultStore
from ..yardstick_files import YARDSTICKS, YardstickFiles, yardstick_key
from ..yardsticks import Yardsticks

if TYPE_CHECKING:
    from ..sweep import SweepPlan


def process_yardsticks(plan: "SweepPlan", copies: ProblemCopies, store: ResultStore) -> Yardsticks:
    """The yardsticks of this process, made once per process: their pieces are shared through the folder."""
    timesteps, noise_batches = list(plan.grid.timesteps), plan.config.noise_batches
    files = YardstickFiles(store.root / YARDSTICKS, yardstick_key(store.digest, timesteps, noise_batches), plan.device)
    return Yardsticks(copies, timesteps, noise_batches, plan.device, files)


def sweep_context(plan: "SweepPlan", copies: ProblemCopies, yardsticks: Yardsticks) -> SweepContext:
    """A fresh reference cache over the plan's problem, its cast copies and the yardsticks (made once per process)."""
    config = plan.config
    step_control = {"rtol": config.rtol, "atol": config.atol, "max_steps": config.max_steps}
    return SweepContext(
        copies, ReferenceCache(copies, config.scaler), plan.device, config.scaler, config.repeats, config.timeout,
        step_control=step_control, yardsticks=yardsticks, fp8_scaling=config.fp8_scaling, cpu_memory=config.cpu_memory,
    )


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
