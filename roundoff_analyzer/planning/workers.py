"""How many processes a sweep uses when `--workers` is not given: one per core, where the grid is large enough.

Worker processes pay off once the grid's work outweighs what they cost to start (a fork server that
imports torch, about a second) and what stays serial (planning, the tables, the report). The work is
counted as in `groups.estimated_cost`, right-hand-side evaluations; below AUTO_MIN_EVALUATIONS a sweep
runs in one process. The default otflow sweep (5,880 evaluations) takes both cores of a 2-core
machine; the test suite's tiny grids (a few hundred) take one.
"""

from __future__ import annotations

import torch

from ..axes.grid import Configuration
from ..core.threads import available_cores
from .groups import estimated_cost, reference_groups

AUTO_MIN_EVALUATIONS = 2000


def auto_workers(configurations: list[Configuration], device: torch.device) -> tuple[int, str]:
    """(processes, why) for a sweep of these configurations on `device`."""
    if device.type != "cpu":
        return 1, f"{device.type}: one process drives the device"
    cores = available_cores()
    if cores < 2:
        return 1, "one core"
    groups = reference_groups(configurations)
    evaluations = sum(estimated_cost(group) for group in groups)
    if evaluations < AUTO_MIN_EVALUATIONS:
        return (
            1,
            f"{evaluations:,} right-hand-side evaluations, below {AUTO_MIN_EVALUATIONS:,}: processes would cost more "
            "than they save",
        )
    workers = min(cores, len(groups))
    return workers, f"{evaluations:,} right-hand-side evaluations in {len(groups)} reference groups, {cores} cores"
