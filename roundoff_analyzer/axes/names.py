"""Each axis's built-in values by name, for `--help`, which must show them without importing torch, and for the
config's check of an executor's name (the executors run plans, so planning cannot import them).

The registries are the truth (`roundoff list`); tests/test_cli.py checks that every name a registry
allows is here. Libraries from other packages' entry points are named from their metadata, also
without importing anything.
"""

from __future__ import annotations

import importlib.metadata

BUILT_IN: dict[str, tuple[str, ...]] = {
    "methods": ("euler", "midpoint", "heun2", "heun3", "rk4", "rk4_classical", "rk4_38", "dopri5", "tsit5"),
    "dtypes": (
        "bfloat16",
        "float16",
        "float32",
        "float8_e4m3",
        "float8_e5m2",
        "eXmY (X exponent bits 2-8, Y mantissa bits 1-23), e.g. e4m3, e5m7",
    ),
    "scalings": ("dynamic", "grad", "none"),
    "modes": ("autocast", "autocast-nocache", "pure"),
    "libraries": ("native", "native-low", "torchdiffeq", "torchdiffeq-adjoint", "torchode", "torchdyn", "rampde"),
    "arithmetics": ("emulated", "hardware"),
    "roundings": ("nearest", "stochastic"),
    "loss_placements": ("float32", "autocast"),
    "executors": ("local", "processes", "slurm"),
    "updates": ("nearest", "stochastic", "kahan", "stochastic-kahan"),  # the training's update rules
}
LIBRARY_ENTRY_POINTS = "roundoff_analyzer.libraries"
# Executors registered in this process through roundoff_analyzer.plugins.register_executor: the config's check, which
# cannot import the executors, knows them by these names.
REGISTERED_EXECUTORS: list[str] = []


def axis_names(axis: str) -> list[str]:
    """The values of `axis` (a key of BUILT_IN); for libraries, those of installed plug-ins too."""
    names = list(BUILT_IN[axis])
    if axis == "executors":
        names += [name for name in REGISTERED_EXECUTORS if name not in names]
    if axis == "libraries":
        names += [
            entry.name
            for entry in importlib.metadata.entry_points(group=LIBRARY_ENTRY_POINTS)
            if entry.name not in names
        ]
    return names
