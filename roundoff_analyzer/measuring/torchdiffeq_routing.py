"""A model measured as it calls torchdiffeq: during a sweep's step, every call of torchdiffeq's `odeint` and
`odeint_adjoint` is answered by the `odeint` the step is handed (the library under test), so that public code whose
modules call torchdiffeq themselves (an `ODEBlock` whose `forward` calls the `odeint` its `models.py` imported with
`from torchdiffeq import odeint`) is swept unchanged, its `step` free to ignore the `odeint` argument.

The calls are found by name: every module loaded when the step begins whose globals hold torchdiffeq's two functions
(under any name: `from torchdiffeq import odeint_adjoint as odeint`), torchdiffeq's own namespace among them (for
`torchdiffeq.odeint(...)`), has those names pointed at a router for the step and back afterwards, even when the step
raises. While the library under test solves (`ConfiguredOdeint.solving`), the names answer as torchdiffeq's own: the
library may be torchdiffeq. A call that reaches torchdiffeq by another way (an attribute, a default argument or a
`partial` holding the function) would solve with torchdiffeq's own method and precision in every configuration: it is
refused instead, by torchdiffeq's checking of its inputs, which only such a call runs during the step.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torchdiffeq

from ..core.user_code import module_label
from .solve_calls import ConfiguredOdeint

# torchdiffeq's functions a step may call, by the name torchdiffeq gives them.
_FUNCTIONS = {"odeint": torchdiffeq.odeint, "odeint_adjoint": torchdiffeq.odeint_adjoint}
# What every call of either function runs first, in the modules that define them; replaced during the step by a
# refusal, since only a call that was not routed reaches it.
_CHECKED_IN = ("torchdiffeq._impl.odeint", "torchdiffeq._impl.adjoint")
_CHECK = "_check_inputs"
UNROUTED = (
    "the step called torchdiffeq's {function} through a reference the sweep cannot route (an attribute, a default "
    "argument or a functools.partial holding the function), so it would solve with torchdiffeq's own method and "
    "precision in every configuration; call it through a module-level name (from torchdiffeq import {function}) or "
    "through the odeint handed to the step"
)


@dataclass(frozen=True)
class RoutedName:
    """A name a module bound to one of torchdiffeq's functions: `module.name` is torchdiffeq's `function`."""

    module: str
    name: str
    function: str


@dataclass(frozen=True)
class RoutedSolves:
    """How many solves of one step came through one routed name (the manifest's `problem.routed`)."""

    module: str
    name: str
    function: str
    solves: int


def routed_solves(origins: Iterable[object]) -> tuple[RoutedSolves, ...]:
    """The routed names among a step's solves' origins (`SolveRecord.origin`), each with its count, in order."""
    counts = Counter(origin for origin in origins if isinstance(origin, RoutedName))
    return tuple(RoutedSolves(name.module, name.name, name.function, n) for name, n in counts.items())


@dataclass(frozen=True)
class _Site:
    namespace: dict[str, Any]
    routed: RoutedName


@contextmanager
def routed_to(odeint: ConfiguredOdeint) -> Iterator[None]:
    """Within the block, torchdiffeq's `odeint` and `odeint_adjoint` are `odeint`, under every name a loaded module
    gave them; each solve a routed call makes records the name it came through (`SolveRecord.origin`)."""
    owner = object()
    try:
        for site in _sites():
            if site.namespace.get(site.routed.name) is _original(site):
                _route(site.namespace, site.routed.name, _router(odeint, site), owner)
        for namespace, original, function in _checks():
            _route(namespace, _CHECK, _refusal(odeint, original, function), owner)
        yield
    finally:
        give_back(owner)


# Every name routed now: (the namespace's id, the name) -> (the namespace, what the name was, the routing that set
# it). Written before a name is set and cleared after it is given back, so that it always holds at least what is
# routed: a time limit's alarm may end a run anywhere, even between a context manager's lines where no `finally` of
# the routing's runs, and `give_back()` then gives back what was left (measuring/torch_state.py, after every run).
_routed: dict[tuple[int, str], tuple[dict[str, Any], str, Any, object]] = {}


def _route(namespace: dict[str, Any], name: str, value: Any, owner: object) -> None:
    _routed[(id(namespace), name)] = (namespace, name, namespace[name], owner)
    namespace[name] = value


def give_back(owner: object | None = None) -> None:
    """Every name a routing (`owner`; None: every routing) set, given back what it was."""
    for key, (namespace, name, original, by) in list(_routed.items()):
        if owner is None or by is owner:
            namespace[name] = original
            del _routed[key]


def _router(odeint: ConfiguredOdeint, site: _Site):
    original = _original(site)

    def router(*args, **kwargs):
        if odeint.solving:  # the library under test's own call (it may be torchdiffeq), or one from inside the field
            return original(*args, **kwargs)
        solves = odeint.solves
        before = len(solves)
        try:
            return odeint(*args, **kwargs)
        finally:
            for record in solves[before:]:
                record.origin = site.routed

    return router


def _original(site: _Site):
    return _FUNCTIONS[site.routed.function]


def _refusal(odeint: ConfiguredOdeint, original, function: str):
    def checked(*args, **kwargs):
        if odeint.solving:
            return original(*args, **kwargs)
        raise TypeError(UNROUTED.format(function=function))

    return checked


def _checks() -> list[tuple[dict[str, Any], Any, str]]:
    """(namespace, its input check, the function whose module it is) where torchdiffeq has them."""
    found = []
    for name, function in zip(_CHECKED_IN, _FUNCTIONS):
        namespace = getattr(sys.modules.get(name), "__dict__", None)
        if isinstance(namespace, dict) and callable(namespace.get(_CHECK)):
            found.append((namespace, namespace[_CHECK], function))
    return found


_scanned: tuple[int, list[_Site]] = (-1, [])


def _sites() -> list[_Site]:
    """Every module global that is one of torchdiffeq's functions; scanned again only when modules were loaded since."""
    global _scanned
    loaded = len(sys.modules)
    if _scanned[0] != loaded:
        _scanned = (loaded, list(_scan()))
    return _scanned[1]


def _scan() -> Iterator[_Site]:
    wanted = {id(function): name for name, function in _FUNCTIONS.items()}
    for module_name, module in list(sys.modules.items()):
        try:
            namespace = module.__dict__
        except Exception:  # noqa: BLE001 - an object some library put in sys.modules, not a module to scan
            continue
        if not isinstance(namespace, dict):
            continue
        for name, value in list(namespace.items()):
            function = wanted.get(id(value))
            if function is not None and value is _FUNCTIONS[function]:
                label = module_label(module_name, namespace.get("__file__"))
                yield _Site(namespace, RoutedName(label, name, function))


def user_import(routed: RoutedSolves) -> str | None:
    """The line that bound a routed name (`from torchdiffeq import odeint_adjoint as odeint`); None for torchdiffeq's
    own namespace (calls written `torchdiffeq.odeint(...)`)."""
    if routed.module.split(".")[0] == "torchdiffeq":
        return None
    shown = routed.function if routed.name == routed.function else f"{routed.function} as {routed.name}"
    return f"from torchdiffeq import {shown}"


def routed_words(routed: Iterable[RoutedSolves]) -> str:
    """Where routed solves came from, in words: `1 through odeblock_models.odeint (from torchdiffeq import odeint)`."""
    parts = []
    for r in routed:
        line = user_import(r)
        parts.append(
            f"{r.solves} through `torchdiffeq.{r.function}`"
            if line is None
            else f"{r.solves} through `{r.module}.{r.name}` (`{line}`)"
        )
    return ", ".join(parts)
