"""How many processes a sweep uses when `--workers` is not given: one per core, where the grid is large enough.

Worker processes pay off once the grid's work outweighs what they cost to start (a fork server that
imports torch, about a second) and what stays serial (planning, the tables, the report). The work is
counted as in `groups.evaluations`, the runs' right-hand-side evaluations; below AUTO_MIN_EVALUATIONS a sweep
runs in one process. The default otflow sweep (5,880 evaluations) takes both cores of a 2-core
machine; the test suite's tiny grids (a few hundred) take one.

This module imports no torch (the grid's types only for checking): the command line asks `may_use_processes` before
it loads torch, to start the workers' fork server while it does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..core.cores import available_cores

if TYPE_CHECKING:
    import torch

    from ..axes.grid import Configuration

AUTO_MIN_EVALUATIONS = 2000
EXECUTORS_WITH_PROCESSES = (None, "processes")  # None: planning chooses, and chooses `processes` for more than one


def auto_workers(configurations: list[Configuration], device: torch.device) -> tuple[int, str]:
    """(processes, why) for a sweep of these configurations on `device`."""
    from .groups import evaluations, reference_groups  # the grid's methods, which import torch

    if device.type != "cpu":
        return 1, f"{device.type}: one process drives the device"
    cores = available_cores()
    if cores < 2:
        return 1, "one core"
    groups = reference_groups(configurations)
    n_evaluations = sum(evaluations(group) for group in groups)
    if n_evaluations < AUTO_MIN_EVALUATIONS:
        return (
            1,
            f"{n_evaluations:,} right-hand-side evaluations, below {AUTO_MIN_EVALUATIONS:,}: processes would cost more "
            "than they save",
        )
    workers = min(cores, len(groups))
    return workers, f"{n_evaluations:,} right-hand-side evaluations in {len(groups)} reference groups, {cores} cores"


def may_use_processes(settings: dict[str, Any]) -> bool:
    """Whether planning may run a sweep with these settings (a config file's keys, not validated yet) in worker
    processes, judged before torch is loaded: on `executor`, `workers`, `device` and the cores alone, since the grid's
    size (`auto_workers`'s test) needs torch, and so does validating an axis. True for a grid that turns out too small,
    whose fork server is then started for nothing, on a core that sits idle."""
    executor, workers, device = settings.get("executor"), settings.get("workers"), settings.get("device", "auto")
    if executor not in EXECUTORS_WITH_PROCESSES:
        return False
    if workers is not None:
        return isinstance(workers, int) and workers > 1
    return device in ("auto", "cpu") and available_cores() >= 2
