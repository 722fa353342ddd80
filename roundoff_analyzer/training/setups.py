"""The training setups: one per (library, dtype, scaling, weights, update) of the asked lists, all with the same method,
grid and mode. `dtype` is the precision the forward and backward compute in; `weights` where the weights live
(float32 master weights, or stored in a low format) and `update` how each step is rounded into them.

The first setup is the reference every other is compared with: float32 compute on float32 master weights, with the
first library asked. Where the lists or `[[setups]]` do not ask for it (`--weights bfloat16` alone), it is added, and
`added` says so: a training judged against another setup (its own bfloat16 weights) would hold against that setup,
not against float32 training. Float32 master weights keep the optimizer's step as float32 computes it,
so they take the update `nearest` whatever the update list says (an explicit `[[setups]]` entry asking otherwise
is refused). Combinations a library cannot run (the `dynamic` scaling outside the native solver)
are left out, and `left_out` says why. float32 trains without scaling whatever the scaling list says: a scale
changes nothing in a dtype whose range the gradients never leave, and the reference must be plain float32.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..axes.dtypes import DTYPES
from ..axes.grid import Configuration, file_safe
from ..axes.libraries import LIBRARIES
from ..axes.methods import METHODS
from ..axes.scalings import SCALINGS
from ..core.errors import InputError
from .config import MASTER_WEIGHTS, TrainConfig

REFERENCE_DTYPE = "float32"
REFERENCE_WHY = "float32 compute on float32 master weights, the reference every setup is judged against, not asked for"


# What a setup's manifest entry and checkpoint metadata say about it, besides its label.
SETUP_FIELDS = (
    "library",
    "method",
    "n_timesteps",
    "dtype",
    "scaling",
    "mode",
    "arithmetic",
    "weights",
    "update",
    "optimizer_state",
)
# What a setup's manifest entry from before the weights axis lacks: it trained these.
SETUP_DEFAULTS = {"weights": MASTER_WEIGHTS, "update": "nearest", "optimizer_state": "float32"}


@dataclass(frozen=True)
class TrainSetup(Configuration):
    """One training setup: the sweep's configuration it computes each step's loss and gradient as (the dtype's own
    arithmetic), and where its weights live."""

    weights: str = MASTER_WEIGHTS
    update: str = "nearest"
    optimizer_state: str = "float32"

    @property
    def setup_label(self) -> str:
        """A file-name-safe name: the folder `setups/<label>` and the `setup` column (float32 master weights add
        nothing, so labels from before the weights axis stay the same)."""
        parts = [self.dtype, self.library, self.scaling]
        if self.weights != MASTER_WEIGHTS:
            parts += [f"weights_{self.weights}", self.update] + (
                [f"state_{self.weights}"] if self.optimizer_state == "weights" else []
            )
        return "-".join(file_safe(part) for part in parts)

    def as_dict(self) -> dict:
        return {"label": self.setup_label, **{name: getattr(self, name) for name in SETUP_FIELDS}}


@dataclass(frozen=True)
class SetupChoice:
    setups: list[TrainSetup]  # the reference first
    left_out: list[str]  # "<label>: why"
    added: list[str] = field(default_factory=list)  # "<label>: why", the reference where it was not asked for


Asked = tuple[str, str, str, str, str, str]  # library, dtype, scaling, weights, update, optimizer_state


def _asked(config: TrainConfig) -> list[Asked]:
    """The config's `setups` as listed, or the product of its lists; the float32 reference first."""
    if config.setups is not None:
        for entry in config.setups:
            if entry.weights == MASTER_WEIGHTS and entry.update != "nearest":
                raise InputError(
                    f"a [[setups]] entry asks for update '{entry.update}' with float32 master weights, which keep the "
                    "optimizer's step as float32 computes it; give weights = a low format (bfloat16, float16, eXmY)"
                )
        asked = [
            (
                entry.library,
                entry.dtype,
                entry.scaling,
                entry.weights,
                entry.update,
                entry.optimizer_state or config.optimizer_state,
            )
            for entry in config.setups
        ]
    else:
        asked = [
            (library, dtype, scaling, weights, update, config.optimizer_state)
            for weights in config.weights
            for update in config.update
            for dtype in config.dtype
            for library in config.library
            for scaling in config.scaling
        ]
    asked = [
        (library, dtype, "none" if dtype == REFERENCE_DTYPE else scaling, weights, *_master(weights, update, state))
        for library, dtype, scaling, weights, update, state in asked
    ]
    if not any(_is_reference(a) for a in asked):
        asked.insert(0, (asked[0][0], REFERENCE_DTYPE, "none", MASTER_WEIGHTS, "nearest", "float32"))
    return sorted(
        dict.fromkeys(asked), key=lambda a: not (a[1] == REFERENCE_DTYPE and a[3] == MASTER_WEIGHTS)
    )  # stable


def _is_reference(asked: Asked) -> bool:
    return asked[1] == REFERENCE_DTYPE and asked[3] == MASTER_WEIGHTS


def _master(weights: str, update: str, state: str) -> tuple[str, str]:
    # Float32 master weights: the optimizer's own step, its state in float32.
    return ("nearest", "float32") if weights == MASTER_WEIGHTS else (update, state)


def choose_setups(config: TrainConfig) -> SetupChoice:
    method = METHODS.get(config.method)
    setups, left_out = [], []
    asked = _asked(config)  # the reference first
    for library, dtype, scaling, weights, update, state in asked:
        setup = TrainSetup(
            config.model,
            library,
            config.method,
            config.timesteps,
            dtype,
            scaling,
            config.mode,
            DTYPES.get(dtype).default_arithmetic,
            weights=weights,
            update=update,
            optimizer_state=state,
        )
        implementation = LIBRARIES.get(library)
        reason = SCALINGS.get(scaling).skip_reason(implementation) or implementation.unsupported_method_reason(method)
        (left_out.append(f"{setup.setup_label}: {reason}") if reason else setups.append(setup))
    if method.adaptive:
        raise InputError(f"method '{config.method}' is adaptive; training steps on a fixed grid (euler or rk4)")
    added = [] if _was_asked(config) else [f"{setups[0].setup_label}: {REFERENCE_WHY}"] if setups else []
    if len(setups) == len(added):  # nothing asked for can run: the reference alone answers nothing
        raise InputError(f"no setup can run: {'; '.join(left_out)}")
    if not (setups[0].dtype == REFERENCE_DTYPE and setups[0].weights == MASTER_WEIGHTS):
        raise InputError(
            f"the reference, {REFERENCE_DTYPE} compute on float32 master weights, cannot run with library "
            f"{asked[0][0]} ({'; '.join(left_out)}); every setup is judged against it"
        )
    return SetupChoice(setups, left_out, added)


def _was_asked(config: TrainConfig) -> bool:
    if config.setups is not None:
        return any(e.dtype == REFERENCE_DTYPE and e.weights == MASTER_WEIGHTS for e in config.setups)
    return REFERENCE_DTYPE in config.dtype and MASTER_WEIGHTS in config.weights
