"""torchdiffeq's `odeint` and `odeint_adjoint`, answered by another solver wherever a model calls them itself, so that
code which imports torchdiffeq in its own modules (an `ODEBlock` whose `forward` calls `odeint(..., method="dopri5")`,
or a package such as torchcde whose `cdeint` calls `torchdiffeq.odeint_adjoint`) solves as measured, unedited:

    from roundoff_analyzer.solvers import answered_by, equal_steps, odeint
    with answered_by(odeint, method="rk4_classical", options=dict(grid_constructor=equal_steps(8))):
        loss = loss_fn(model(x))  # every torchdiffeq call inside solves by rk4 in 8 equal steps

The calls are found by name: every module loaded when the block begins whose globals hold torchdiffeq's two functions
(under any name: `from torchdiffeq import odeint_adjoint as odeint`), torchdiffeq's own namespace among them (for
`torchdiffeq.odeint(...)`; its inner modules' names are its own), has those names pointed at a router for the block
and back afterwards, even when the block raises. While the answering solver solves, the names answer as torchdiffeq's
own: that solver may be torchdiffeq. A call that reaches torchdiffeq by another way (an attribute, a default argument
or a `partial` holding the function) would solve with its own method and grid: it is refused instead, by torchdiffeq's
checking of its inputs, which only such a call (or torchdiffeq's own) runs inside the block. The sweep routes a step's
calls with the same mechanism (`routing`).
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import torchdiffeq

from ..core.user_code import module_label

# torchdiffeq's functions a model may call, by the name torchdiffeq gives them.
FUNCTIONS = {"odeint": torchdiffeq.odeint, "odeint_adjoint": torchdiffeq.odeint_adjoint}
# What every call of either function runs first, in the modules that define them; replaced inside the block by a
# refusal, since only a call that was not routed reaches it.
_CHECKED_IN = ("torchdiffeq._impl.odeint", "torchdiffeq._impl.adjoint")
_CHECK = "_check_inputs"
UNROUTED = (
    "torchdiffeq's {function} was called through a reference that cannot be routed (an attribute, a default "
    "argument or a functools.partial holding the function), so it would solve with its own method and grid; call it "
    "through a module-level name (from torchdiffeq import {function}) or through torchdiffeq.{function}"
)
# What a call of either function may name besides (func, y0, t): the solver's choices, which the answering solver's
# replace; `adjoint_params` is passed on to an adjoint that answers.
SOLVER_CHOICES = (
    "rtol",
    "atol",
    "method",
    "options",
    "adjoint_rtol",
    "adjoint_atol",
    "adjoint_method",
    "adjoint_options",
)


@dataclass(frozen=True)
class RoutedName:
    """A name a module bound to one of torchdiffeq's functions: `module.name` is torchdiffeq's `function`. `caller`:
    for a call through torchdiffeq's own namespace, the function that made it as its user knows it
    (`torchcde.cdeint`); None for a call through a module's own name, which says where it is."""

    module: str
    name: str
    function: str
    caller: str | None = None

    @property
    def through_namespace(self) -> bool:
        return self.module.split(".")[0] == "torchdiffeq"


Answer = Callable[[RoutedName, tuple, dict], Any]


@contextmanager
def answered_by(
    odeint: Callable[..., Any], /, *, adjoint: Callable[..., Any] | None = None, **arguments: Any
) -> Iterator[None]:
    """Within the block, every call of torchdiffeq's `odeint` or `odeint_adjoint` that a loaded module makes (under
    any name it imported them by, or as `torchdiffeq.odeint(...)`) is answered by `odeint(func, y0, t, **arguments)`:
    the call's own method, rtol, atol and options give way (a `method="dopri5"` call is answered by the fixed-grid
    method given), so the model solves as measured without an edit.

    Args:
        odeint: The solver that answers, with torchdiffeq's signature: `roundoff_analyzer.solvers.odeint`,
            torchdiffeq's own `odeint`, or a `functools.partial` of one holding the method and grid.
        adjoint: The solver that answers `odeint_adjoint` calls (torchdiffeq's `odeint_adjoint`), given the call's
            `adjoint_params` where it named them; None: `odeint` answers those too.
        **arguments: What every answering call is given: `method=...`, `options=dict(grid_constructor=...)`.

    Raises:
        NotImplementedError: A call with an `event_fn` (its solve ends at a time of its own, not on the grid given).
        TypeError: A call through a reference the block cannot route (an attribute or a default argument holding
            torchdiffeq's function), which would solve with its own method and grid.

    Example:
        ```python
        from roundoff_analyzer.solvers import answered_by, equal_steps, odeint
        with torch.autocast("cuda", dtype=torch.float16), answered_by(
            odeint, method="rk4_classical", options=dict(grid_constructor=equal_steps(8))
        ):
            loss = loss_fn(model(x))
        loss.backward()
        ```
    """
    answering = 0

    def answer(routed: RoutedName, args: tuple, kwargs: dict) -> Any:
        nonlocal answering
        func, y0, t, named = _call_parts(args, kwargs)
        if named.get("event_fn") is not None:
            raise NotImplementedError(
                f"{routed.caller or routed.function} was called with an event_fn, which ends its solve at a time of "
                "its own; answered_by solves on the grid it was given"
            )
        solver, extra = odeint, {}
        if routed.function == "odeint_adjoint" and adjoint is not None:
            solver = adjoint
            if named.get("adjoint_params") is not None:
                extra["adjoint_params"] = named["adjoint_params"]
        answering += 1
        try:
            return solver(func, y0, t, **arguments, **extra)
        finally:
            answering -= 1

    with routing(answer, lambda: answering > 0):
        yield


def _call_parts(args: tuple, kwargs: dict) -> tuple[Any, Any, Any, dict]:
    """(func, y0, t, the rest by name) of a call made with torchdiffeq's signature."""
    names = ("func", "y0", "t", "rtol", "atol", "method", "options", "event_fn")
    named = dict(zip(names, args))
    clash = sorted(set(named) & set(kwargs))
    if clash or len(args) > len(names):
        raise TypeError(f"odeint got {'several values for ' + ', '.join(clash) if clash else 'too many arguments'}")
    named.update(kwargs)
    missing = [name for name in names[:3] if name not in named]
    if missing:
        raise TypeError(f"odeint is missing {', '.join(missing)}")
    return named.pop("func"), named.pop("y0"), named.pop("t"), named


@contextmanager
def routing(answer: Answer, own: Callable[[], bool], unrouted: str = UNROUTED) -> Iterator[None]:
    """Within the block, each call of torchdiffeq's `odeint` and `odeint_adjoint` through a name a loaded module gave
    them is `answer(the name it came through, args, kwargs)`, except while `own()` (the answering solver solves: its
    calls of torchdiffeq are torchdiffeq's own). A call by another way raises TypeError(`unrouted`)."""
    owner = object()
    try:
        for site in _sites():
            if site.namespace.get(site.routed.name) is _original(site):
                _route(site.namespace, site.routed.name, _router(answer, own, site), owner)
        for namespace, original, function in _checks():
            _route(namespace, _CHECK, _refusal(own, original, unrouted.format(function=function)), owner)
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


@dataclass(frozen=True)
class _Site:
    namespace: dict[str, Any]
    routed: RoutedName


def _router(answer: Answer, own: Callable[[], bool], site: _Site):
    original = _original(site)

    def router(*args, **kwargs):
        if own():  # the answering solver's own call (it may be torchdiffeq), or one from inside the field
            return original(*args, **kwargs)
        routed = site.routed
        if routed.through_namespace:
            routed = replace(routed, caller=_caller(sys._getframe(1)))
        return answer(routed, args, kwargs)

    return router


def _caller(frame: Any) -> str | None:
    """The function of `frame` as its user knows it: `torchcde.cdeint` where the package exports the function of
    `torchcde.solver` by that name, else its module's and its own name."""
    module = frame.f_globals.get("__name__")
    if not isinstance(module, str):
        return None
    label = module_label(module, frame.f_globals.get("__file__"))
    name = frame.f_code.co_qualname
    top = sys.modules.get(module.split(".")[0])
    function = frame.f_globals.get(name)
    if top is not None and function is not None and getattr(top, name, None) is function:
        return f"{module.split('.')[0]}.{name}"
    return f"{label}.{name}"


def _original(site: _Site):
    return FUNCTIONS[site.routed.function]


def _refusal(own: Callable[[], bool], original, message: str):
    def checked(*args, **kwargs):
        # The solve that checks its inputs here (frame 1) was called by torchdiffeq itself (odeint_adjoint's forward,
        # its backward's solves) or by no routed name.
        if own() or _in_torchdiffeq(sys._getframe(1).f_back):
            return original(*args, **kwargs)
        raise TypeError(message)

    return checked


def _in_torchdiffeq(frame: Any) -> bool:
    module = frame.f_globals.get("__name__") if frame is not None else None
    return isinstance(module, str) and module.split(".")[0] == "torchdiffeq"


def _checks() -> list[tuple[dict[str, Any], Any, str]]:
    """(namespace, its input check, the function whose module it is) where torchdiffeq has them."""
    found = []
    for name, function in zip(_CHECKED_IN, FUNCTIONS):
        namespace = getattr(sys.modules.get(name), "__dict__", None)
        if isinstance(namespace, dict) and callable(namespace.get(_CHECK)):
            found.append((namespace, namespace[_CHECK], function))
    return found


_scanned: tuple[int, Callable[[], object] | None, list[_Site]] = (-1, None, [])


def _sites() -> list[_Site]:
    """Every module global that is one of torchdiffeq's functions; scanned again only when modules were loaded since:
    more of them, or another last one (a module taken out and imported again leaves their number as it was). The last
    one is held by a weak reference, not its id: a module imported again may be given the freed one's address."""
    global _scanned
    count, last = len(sys.modules), next(reversed(sys.modules.values()), None)
    seen_count, seen_last, sites = _scanned
    if count != seen_count or seen_last is None or seen_last() is not last:
        sites = list(_scan())
        _scanned = (count, _weak(last), sites)
    return sites


def _weak(value: object) -> Callable[[], object] | None:
    try:
        return weakref.ref(value)
    except TypeError:  # an object some library put in sys.modules that takes no weak reference: scan every time
        return None


def _scan() -> Iterator[_Site]:
    wanted = {id(function): name for name, function in FUNCTIONS.items()}
    for module_name, module in list(sys.modules.items()):
        if module_name.startswith("torchdiffeq."):
            # torchdiffeq's own solves (odeint_adjoint's forward and the backward's, which may run after the block's
            # solve has returned, inside it or not) stay its own; its namespace answers `torchdiffeq.odeint(...)`.
            continue
        try:
            namespace = module.__dict__
        except Exception:  # noqa: BLE001 - an object some library put in sys.modules, not a module to scan
            continue
        if not isinstance(namespace, dict):
            continue
        for name, value in list(namespace.items()):
            function = wanted.get(id(value))
            if function is not None and value is FUNCTIONS[function]:
                label = module_label(module_name, namespace.get("__file__"))
                yield _Site(namespace, RoutedName(label, name, function))
