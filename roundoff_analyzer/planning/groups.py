"""Work split by reference: the configurations that share one float64 reference (same checkpoint, seed, library,
method and n_timesteps) travel together, so each reference is solved by exactly one worker or array task."""

from __future__ import annotations

from ..axes.grid import Configuration
from ..axes.methods import METHODS


def reference_key(config: Configuration) -> tuple[str, int, str, str, int]:
    return (config.checkpoint, config.seed, config.library, config.method, config.n_timesteps)


def reference_groups(configurations: list[Configuration]) -> list[list[Configuration]]:
    """Groups in grid order inside, the costliest first: workers that take groups as they free up then
    end close together (the last group to start is a short one)."""
    groups: dict[tuple[str, int, str, str, int], list[Configuration]] = {}
    for config in configurations:
        groups.setdefault(reference_key(config), []).append(config)
    return sorted(groups.values(), key=estimated_cost, reverse=True)


def estimated_cost(group: list[Configuration]) -> int:
    """Right-hand-side evaluations of the group's runs: configurations x n_timesteps x stages."""
    first = group[0]
    return len(group) * first.n_timesteps * METHODS.get(first.method).n_stages
