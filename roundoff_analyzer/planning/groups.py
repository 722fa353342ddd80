"""Work split by reference: the configurations that share one float64 reference (same checkpoint, seed, library,
method and n_timesteps) travel together, so each reference is solved by exactly one worker or array task."""

from __future__ import annotations

from ..axes.grid import Configuration
from ..axes.methods import METHODS

# A group's float64 reference costs up to about one of its configurations' work (bench/group_costs.py prints the
# measured ratio), so a group of 3 configurations costs more than 3/4 of a like group of 4.
REFERENCE_RUNS = 1


def reference_key(config: Configuration) -> tuple[str, int, str, str, int]:
    return (config.checkpoint, config.seed, config.library, config.method, config.n_timesteps)


def reference_groups(
    configurations: list[Configuration], solved_by_yardsticks: tuple[str, str, int] | None = None
) -> list[list[Configuration]]:
    """Groups in grid order inside, the costliest first (`estimated_cost`): workers that take groups as they free up
    then end close together (the last group to start is a short one). `solved_by_yardsticks`: (library, method,
    n_timesteps) of the groups whose reference the yardsticks solve (execution/in_process.py's
    fine_quarter_reference), which cost their runs only."""
    groups: dict[tuple[str, int, str, str, int], list[Configuration]] = {}
    for config in configurations:
        groups.setdefault(reference_key(config), []).append(config)

    def cost(group: list[Configuration]) -> int:
        first = group[0]
        return estimated_cost(group, (first.library, first.method, first.n_timesteps) == solved_by_yardsticks)

    return sorted(groups.values(), key=cost, reverse=True)


def evaluations(group: list[Configuration]) -> int:
    """Right-hand-side evaluations of the group's runs: configurations x n_timesteps x stages."""
    first = group[0]
    return len(group) * first.n_timesteps * METHODS.get(first.method).n_stages


def estimated_cost(group: list[Configuration], reference_solved_elsewhere: bool = False) -> int:
    """The group's work, in right-hand-side evaluations: its runs' and its float64 reference's (REFERENCE_RUNS
    configurations' worth), the reference left out where another piece of the sweep solves it."""
    first = group[0]
    runs = len(group) + (0 if reference_solved_elsewhere else REFERENCE_RUNS)
    return runs * first.n_timesteps * METHODS.get(first.method).n_stages
