"""The tensors a vector field reaches that gradients must reach, found once per solve from its first evaluation, so
that every field torchdiffeq accepts trains: an `nn.Module`, a closure or lambda over modules and tensors, a
`functools.partial`, a bound method, a plain function using global modules.

The solver's backward takes the vector-Jacobian product of each step with respect to the state and a list of
tensors; a tensor missing from that list gets no gradient, silently. The list is what the first stage of the first
step uses that it did not make itself: every tensor requiring grad handed to a torch operation during that evaluation
(a `TorchFunctionMode` sees them: parameters, tensors closed over, globals, a conditioning tensor computed before the
solve), checked against the autograd graph of its output (walked from its output back to the leaves, it adds a leaf
that an operation the mode cannot see used, and drops what the output does not depend on). A tensor computed before
the solve is a boundary: the gradient the solver returns for it travels on through its own graph, which the solver's
steps never walk. An `nn.Module`'s own trainable parameters are added where the first evaluation did not reach them
(a branch taken at a later time), as torchdiffeq's `odeint_adjoint` takes them.

Refused before solving, in one line that says to pass `params=`: a leaf reached only through a graph made before the
solve that the field's operations did not show (the solver could not tell which tensor to hand the gradient to), and
a tensor reached both directly and through a tensor computed from it before the solve (the steps' products would
count that path twice).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

PASS_PARAMS = "pass params=[...] (adjoint_params= for odeint_adjoint): the tensors the field uses that need gradients"


class FieldTensorsUnknown(ValueError):
    """The tensors a vector field reaches could not be told from its first evaluation; `params=` names them."""


@dataclass
class Reached:
    """What the first evaluation found: the tensors gradients must reach besides y0, its output (without a graph),
    which is the first stage of the first step, and every tensor requiring grad that it was seen to use (by id)."""

    params: list[torch.Tensor]
    first_stage: torch.Tensor | None
    used: frozenset[int] = frozenset()
    # The state it was evaluated at and its output with the output's graph, where asked to keep it (`keep_graph`).
    state: torch.Tensor | None = None
    first_output: torch.Tensor | None = None
    # Whether the output's graph reached every one of the field's own parameters.
    reached_own: bool = False
    # Whether the evaluation made a leaf of its own that its output depends on (a state detached inside the field).
    made_leaves: bool = False
    # Autograd's node counter before the evaluation: a node made since is the solve's own.
    start: int = 0


def reached_tensors(
    func: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    time: torch.Tensor,
    y: torch.Tensor,
    own: Sequence[torch.Tensor] = (),
    keep_graph: bool = False,
) -> Reached:
    """Evaluate `func(time, y)` once and find the tensors requiring grad that it reaches; `own`: the field's own
    parameters (an `nn.Module`'s), kept where not reached. Without grad mode nothing is evaluated: no gradient is
    asked for. `keep_graph`: evaluated at a leaf requiring grad, the output's graph kept (`Reached.first_output`)."""
    if not torch.is_grad_enabled():
        return Reached(_distinct(own), None)
    y = y.detach().requires_grad_(keep_graph)
    time = time.detach()
    start = _sequence_now()
    uses = _Uses({id(y), id(time)})
    with uses:
        out = func(time, y)
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"the vector field must return a tensor, not a {type(out).__name__}")
    made: list[bool] = []
    found = _walk(out, uses, start, _distinct(own), made)
    params = _with_own(found, own)
    return Reached(
        params,
        out.detach(),
        frozenset(uses.used) | {id(x) for x in params},
        y if keep_graph else None,
        out if keep_graph else None,
        {id(p) for p in own if p.requires_grad} <= {id(x) for x in found},
        bool(made),
        start,
    )


def refuse_later_reach(
    outputs: Sequence[tuple[Any, int, torch.Tensor]], states: Sequence[torch.Tensor], reached: Reached
) -> None:
    """One walk of the graphs a solve kept (`outputs`: each evaluation's output as its graph node and output number,
    and its time, in the order evaluated;
    `states`: the leaves they start from) back to what they reach, refused where that is a leaf requiring grad the
    first evaluation neither used nor was given (a later branch into another module: no gradient would reach it). A
    graph made before the solve is walked through to its leaves, up to a tensor the first evaluation used."""
    known = reached.used | {id(x) for x in states}
    boundary = {_edge(x) for x in reached.params if x.grad_fn is not None}
    seen: set[int] = set()
    for node, output_nr, time in outputs:
        stack = [(node, output_nr)]
        while stack:
            node, index = stack.pop()
            if node is None or id(node) in seen or (id(node), index) in boundary:
                continue
            seen.add(id(node))
            variable = getattr(node, "variable", None)
            if variable is None:
                stack.extend(node.next_functions)
            elif id(variable) not in known:
                raise FieldTensorsUnknown(
                    f"the vector field used a {_described(variable)} at t = {float(time):.6g} that its first "
                    f"evaluation did not (a later branch), so no gradient would reach it; {PASS_PARAMS}"
                )


class LaterReachChecked:
    """`func`, each evaluation refused where it uses a tensor requiring grad that the first evaluation neither used nor
    was given (`reached`): a closure that switches modules at a later time (`net_a(y) if t < 0.5 else net_b(y)`), whose
    gradients would otherwise be none, silently. Its operations are watched as the first evaluation's were; `func`
    itself is what the backward evaluates again (the same evaluations, already checked). A tensor with a graph made
    since the solve began is an evaluation's own, made by an operation no mode sees (a scripted function's output,
    which requires grad even without grad mode)."""

    def __init__(self, func: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], reached: Reached) -> None:
        self.func, self.known, self.start = func, reached.used, _sequence_now()

    def __call__(self, time: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        uses = _Uses({id(y), id(time)})
        with uses:
            out = self.func(time, y)
        new = [
            x
            for key, x in uses.used.items()
            if key not in self.known and (x.grad_fn is None or _older(x.grad_fn, self.start))
        ]
        if new:
            raise FieldTensorsUnknown(
                f"the vector field used a {_described(new[0])} at t = {float(time):.6g} that its first evaluation did "
                f"not (a later branch), so no gradient would reach it; {PASS_PARAMS}"
            )
        return out


class _Uses(TorchFunctionMode):
    """Every tensor requiring grad that an operation inside the block is handed and that no operation inside it made."""

    def __init__(self, excluded: set[int]) -> None:
        super().__init__()
        self.excluded = excluded
        self.used: dict[int, torch.Tensor] = {}
        self._made: dict[int, torch.Tensor] = {}  # kept alive, so that an id stays its tensor's during the block

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for x in _tensors((args, kwargs)):
            key = id(x)
            if x.requires_grad and key not in self._made and key not in self.excluded:
                self.used.setdefault(key, x)
        out = func(*args, **kwargs)
        for x in _tensors(out):
            self._made.setdefault(id(x), x)
        return out


def _tensors(value) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _tensors(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)


def _sequence_now() -> int:
    """Autograd's node counter now: nodes made from here on carry a larger sequence number."""
    with torch.enable_grad():
        node = torch.zeros((), requires_grad=True).mul(1.0).grad_fn
    assert node is not None
    return node._sequence_nr()


def _walk(out: torch.Tensor, uses: _Uses, start: int, own: list[torch.Tensor], made: list[bool]) -> list[torch.Tensor]:
    """The used tensors the output depends on, in the order of first use, then the others the graph reaches that the
    mode did not see (the field's own parameters among them: a scripted module's calls show none). `made` gets an item
    where the output depends on a leaf the evaluation made."""
    if out.grad_fn is None:
        return []
    known = [*uses.used.values(), *own]
    # A known tensor with a graph is a boundary where that graph was made before the evaluation (a module's parameter
    # can be one: a scripted module's, cast to another dtype); a used one made during it (by an operation the mode
    # does not see, a scripted function's) is the evaluation's own, walked through.
    boundary = {_edge(x): x for x in known if x.grad_fn is not None and _older(x.grad_fn, start)}
    leaves = {id(x): x for x in known if x.grad_fn is None}
    reached: dict[int, torch.Tensor] = {}
    seen: set[tuple[int, bool]] = set()
    stack: list[tuple[Any, int, str | None]] = [(out.grad_fn, out.output_nr, None)]
    while stack:
        node, index, older = stack.pop()
        if node is None:
            continue
        hit = boundary.get((id(node), index))
        if hit is not None:
            reached[id(hit)] = hit
            continue
        if (id(node), older is not None) in seen:
            continue
        seen.add((id(node), older is not None))
        variable = getattr(node, "variable", None)
        if variable is not None:  # a leaf's AccumulateGrad
            # y and t, and a leaf the evaluation made itself (a state detached to take a derivative inside the field,
            # `z.detach().requires_grad_()`): nothing outside the evaluation holds it to be given a gradient.
            if id(variable) in uses._made:
                made.append(True)
            if id(variable) in uses.excluded or id(variable) in uses._made:
                continue
            if id(variable) not in leaves and older is not None:
                raise FieldTensorsUnknown(
                    f"the vector field reaches a {_described(variable)} through a tensor computed before the solve "
                    f"({older}) by an operation this solver cannot see; {PASS_PARAMS}"
                )
            reached[id(variable)] = variable
            continue
        name = older
        if name is None and _older(node, start):
            name = type(node).__name__  # made before the evaluation: an autocast copy of a weight, or a tensor's graph
        stack.extend((following, nr, name) for following, nr in node.next_functions)
    ordered = [x for key, x in uses.used.items() if key in reached]
    return ordered + [x for key, x in reached.items() if key not in uses.used]


def _older(node, start: int) -> bool:
    """Whether an autograd node was made before the sequence number `start`."""
    return getattr(node, "_sequence_nr", lambda: start)() < start


def _edge(x: torch.Tensor) -> tuple[int, int]:
    return id(x.grad_fn), x.output_nr


def _with_own(found: list[torch.Tensor], own: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """`found` with the field's own parameters it lacks, less those computed into a found tensor before the solve;
    refused where a found tensor is itself computed into another."""
    computed = [x for x in found if x.grad_fn is not None]
    upstream = _upstream(computed) if computed else {}
    for x in found:
        inner = upstream.get(id(x))
        if inner is not None:
            raise FieldTensorsUnknown(
                f"the vector field uses a {_described(x)} both directly and through a {_described(inner)} computed "
                f"from it before the solve, a path the solver's steps would count twice; compute that tensor inside "
                f"the field, or {PASS_PARAMS}"
            )
    params = _distinct(found)
    taken = {id(x) for x in params}
    for p in own:
        if p.requires_grad and id(p) not in taken and id(p) not in upstream:
            params.append(p)
            taken.add(id(p))
    return params


def _upstream(computed: list[torch.Tensor]) -> dict[int, torch.Tensor]:
    """Every leaf and every other of `computed` that a tensor of `computed` was computed from: id -> that tensor."""
    edges = {_edge(x): x for x in computed}
    found: dict[int, torch.Tensor] = {}
    for x in computed:
        seen: set[int] = set()
        stack: list[tuple[Any, int]] = list(x.grad_fn.next_functions)  # type: ignore[union-attr]
        while stack:
            node, index = stack.pop()
            if node is None:
                continue
            other = edges.get((id(node), index))
            if other is not None and other is not x:
                found[id(other)] = x
            if id(node) in seen:
                continue
            seen.add(id(node))
            variable = getattr(node, "variable", None)
            if variable is not None:
                found[id(variable)] = x
                continue
            stack.extend(node.next_functions)
    return found


def _distinct(tensors: Iterable[torch.Tensor]) -> list[torch.Tensor]:
    """Each tensor once: a tensor listed twice would receive its gradient twice."""
    return list({id(x): x for x in tensors}.values())


def _described(x: torch.Tensor) -> str:
    shape = "×".join(str(n) for n in x.shape) or "0-dim"
    kind = "parameter" if isinstance(x, torch.nn.Parameter) else "tensor"
    return f"{shape} {str(x.dtype).removeprefix('torch.')} {kind}"
