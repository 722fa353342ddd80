"""The optimizer of a training: a built-in name, or a factory in the user's module (`package.module:factory` or
`path/to/file.py:factory`, the plug-in way of models) called as `factory(params, lr)` and returning a
torch.optim.Optimizer. Whichever it is, it steps in float32 on the weights' stored values; low-precision
weights then round its step as the update axis says."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch

from ...core.errors import InputError, one_line
from ...core.registry import Registry
from ...core.user_code import load_attribute, source_sha256

FACTORY_FORMS = "a built-in optimizer, package.module:factory or path/to/file.py:factory"


@dataclass(frozen=True)
class OptimizerSpec:
    name: str
    description: str
    build: Callable[[Iterable[torch.nn.Parameter], float], torch.optim.Optimizer]
    source_sha256: str | None = None  # a user's factory: the digest of the file it came from

    def record(self) -> dict:
        """What the manifest and the fingerprint say of it."""
        return {"name": self.name, **({"source_sha256": self.source_sha256} if self.source_sha256 else {})}


OPTIMIZERS: Registry[OptimizerSpec] = Registry("optimizer")


def resolve_optimizer(name: str) -> OptimizerSpec:
    """The built-in optimizer `name`, or the user's factory it names; one InputError line where neither is found."""
    if name in OPTIMIZERS:
        return OPTIMIZERS.get(name)
    if ":" not in name:
        raise InputError(
            f"unknown optimizer '{name}'; known: {', '.join(OPTIMIZERS.names())}, or package.module:factory "
            "or path/to/file.py:factory (factory(params, lr) returning a torch.optim.Optimizer)"
        )
    what = f"optimizer '{name}'"
    _, attribute, factory = load_attribute(what, name, FACTORY_FORMS)
    if not callable(factory):
        raise InputError(f"{what}: the module has no function '{attribute}'")
    return OptimizerSpec(name, f"the factory {name}", _checked(what, factory), source_sha256(name))


def _checked(what: str, factory: Callable) -> Callable:
    def build(params, lr):
        try:
            optimizer = factory(params, lr)
        except Exception as exc:  # noqa: BLE001 - the user's factory failed
            raise InputError(f"{what} raised {one_line(exc)}") from None
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise InputError(f"{what} returned {type(optimizer).__name__}, not a torch.optim.Optimizer")
        return optimizer

    return build
