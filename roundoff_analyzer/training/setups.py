"""The training setups: one per (library, dtype, scaling) of the asked lists, all with the same method, grid and mode.

The first setup is the reference every other is compared with: the float32 one where float32 is asked for,
else the first asked. Combinations a library cannot run (the `dynamic` scaling outside the native solver)
are left out, and `left_out` says why. float32 trains without scaling whatever the scaling list says: a scale
changes nothing in a dtype whose range the gradients never leave, and the reference must be plain float32.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..axes.dtypes import DTYPES
from ..axes.grid import Configuration, file_safe
from ..axes.libraries import LIBRARIES
from ..axes.methods import METHODS
from ..axes.scalings import SCALINGS
from ..core.errors import InputError
from .config import TrainConfig

REFERENCE_DTYPE = "float32"


# What a setup's manifest entry and checkpoint metadata say about it, besides its label.
SETUP_FIELDS = ("library", "method", "n_timesteps", "dtype", "scaling", "mode", "arithmetic")


@dataclass(frozen=True)
class TrainSetup(Configuration):
    """One training setup: the sweep's configuration it computes each step's loss and gradient as (the dtype's own arithmetic)."""

    @property
    def label(self) -> str:
        """A file-name-safe name: the folder `setups/<label>` and the `setup` column."""
        return "-".join(file_safe(part) for part in (self.dtype, self.library, self.scaling))

    def as_dict(self) -> dict:
        return {"label": self.label, **{name: getattr(self, name) for name in SETUP_FIELDS}}


@dataclass(frozen=True)
class SetupChoice:
    setups: list[TrainSetup]  # the reference first
    left_out: list[str]  # "<label>: why"


def _asked(config: TrainConfig) -> list[tuple[str, str, str]]:
    """(library, dtype, scaling): the config's `setups` as listed, or the product of its lists; float32 first."""
    if config.setups is not None:
        triples = [(entry.library, entry.dtype, entry.scaling) for entry in config.setups]
    else:
        triples = [(library, dtype, scaling) for dtype in config.dtype for library in config.library for scaling in config.scaling]
    triples = [(library, dtype, "none" if dtype == REFERENCE_DTYPE else scaling) for library, dtype, scaling in triples]
    return sorted(dict.fromkeys(triples), key=lambda triple: triple[1] != REFERENCE_DTYPE)  # stable: float32 first


def choose_setups(config: TrainConfig) -> SetupChoice:
    method = METHODS.get(config.method)
    setups, left_out = [], []
    for library, dtype, scaling in _asked(config):
        setup = TrainSetup(config.model, library, config.method, config.timesteps, dtype, scaling, config.mode,
                           DTYPES.get(dtype).default_arithmetic)  # fmt: skip
        implementation = LIBRARIES.get(library)
        reason = SCALINGS.get(scaling).skip_reason(implementation) or implementation.unsupported_method_reason(method)
        (left_out.append(f"{setup.label}: {reason}") if reason else setups.append(setup))
    if method.adaptive:
        raise InputError(f"method '{config.method}' is adaptive; training steps on a fixed grid (euler or rk4)")
    if not setups:
        raise InputError(f"no setup can run: {'; '.join(left_out)}")
    return SetupChoice(setups, left_out)
