"""One draw for every run of a step: the random numbers a step draws (a VAE's ε = randn_like(std), a Hutchinson
estimator's noise, dropout in training mode) given alike to the float64 reference and to every run compared with it.

Left alone, each run would draw numbers of its own, and the difference between two draws would be measured as
roundoff: torch draws other numbers in float64 than in float32 even from one seed. Inside `same_draws`, every random
function of torch (`randn`, `rand`, `randint`, `randperm`, their `*_like`, `normal`, `normal_`, `uniform_`,
`bernoulli`, `bernoulli_`, dropout's mask, `exponential_`, `random_`) is answered by this module: the k-th random
tensor of a run's forward is drawn from `draw_generator(r, k)` in float64 (or int64) on the CPU, then transformed and
cast to the dtype and device the step asked for, so that it holds the same numbers in every run of draw r, rounded to
the run's dtype. A backward pass that evaluates the field again (the native solver, the adjoint) draws from
generators of its own, each pass as the first: the passes of a loss scaler's search and of scalings sharing a forward
see the same numbers. numpy's and Python's global generators start each run from a state seeded by r, and are put
back after it. A random function not in that list raises (NotImplementedError), rather than draw anew in silence.

Draw r of a solve (its library, method and n_timesteps) must come in the same functions and shapes in every run: the
first run that completes fixes the order, and a run that then draws otherwise (another shape, or more draws: the
native solver's retry of a step or an adaptive method's extra steps, evaluating a vector field that draws) fails
naming the draw. The first run watched tells whether the step draws at all; where it draws nothing, later runs are
not intercepted (each torch operation would pay for it), and a run that then moves torch's, numpy's or Python's global
generator stops the sweep in one line, as does a draw the replay did not see (inside a torch operation that is not
one of the random functions: an RNN's dropout between its layers).

A first run's backward pass is watched operation by operation (autograd runs it without the forward's watch of the
random functions), which costs it several times its own time. A short run of the step (`short_run`: a few steps,
watched whole) spares that: where it drew nothing, the first full run's backward is watched only if that run's
forward drew (a step whose draws depend on its steps or times); where it drew, the step draws, as a first run that
drew would have said.

A run watched module by module (module_hooks.py) keeps its draws in a `DrawRecord`: a module's call re-run in float64,
or again in the run's precision for its backward, is given the numbers that call drew (and numpy's and Python's
generators as they stood when it began), not new ones; a re-run that draws otherwise than its call did raises
DrawMismatch, and the module's row says it was not measured.
"""

from __future__ import annotations

import hashlib
import random
import sys
from collections import Counter
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from ..axes.modes import ProblemCopies
from ..core.errors import InputError

# Draw r is made from seeds of its own, the same in every process of a sweep and in a resumed one (draw_generator).
DRAW_SEED = 61_000


def draw_generator(draw: int, position: int, backward: bool = False) -> torch.Generator:
    """The generator of one random tensor: the `position`-th the step draws in its forward (or in a backward pass,
    each of which draws as the first did, so that a solver that evaluates the field again in its backward sees the
    same numbers in every pass) on draw `draw`. Each from a seed of its own: any run, any pass, gives it alike."""
    # torch's CPU generator keeps 32 bits of a seed: the three numbers are hashed into them.
    key = f"{DRAW_SEED + draw} {'backward' if backward else 'forward'} {position}".encode()
    return torch.Generator().manual_seed(int.from_bytes(hashlib.blake2b(key, digest_size=4).digest(), "little"))


# The key of a step's draws record (`DrawRun.describe`, manifest.json's `problem.draws`) that says a finer grid draws
# more (contract.py): its solve there is another random ODE, which no fine reference solves.
GROWS_WITH_STEPS = "grows_with_steps"


def grows_with_steps(record: dict | None) -> bool:
    """Whether a step's draws record says that more steps draw more numbers."""
    return bool(record and record.get(GROWS_WITH_STEPS))


class DrawMismatch(RuntimeError):
    """A run drew otherwise than the first complete run of its solve and draw did, so its numbers cannot be theirs."""


@dataclass
class DrawRun:
    """What one run drew: the draws per torch function, the numbers drawn, and whether numpy's or Python's global
    generator moved. The caller sets `complete` where the run finished without failure: its order of draws is then the
    one every later run of its solve and draw follows."""

    functions: Counter[str] = field(default_factory=Counter)
    numbers: int = 0
    numpy: bool = False
    python: bool = False
    complete: bool = False
    # numpy's and Python's global generators as the run left them (each run starts them from one seeded state).
    globals_after: tuple = ()

    @property
    def drew(self) -> bool:
        return bool(self.functions) or self.numpy or self.python

    def drew_as_much(self, other: DrawRun) -> bool:
        """Whether `other` drew as much as this run: torch's functions as often, as many numbers, and numpy's and
        Python's generators moved as far (both runs start them from one state, so their states after tell)."""
        mine = (self.functions, self.numbers, self.globals_after)
        return mine == (other.functions, other.numbers, other.globals_after)

    def describe(self) -> dict | None:
        """The record `manifest.json` keeps of a step's draws (`problem.draws`); None where it drew nothing."""
        if not self.drew:
            return None
        return {
            "functions": dict(self.functions),
            "tensors": sum(self.functions.values()),
            "numbers": self.numbers,
            "numpy": self.numpy,
            "python": self.python,
        }


@dataclass
class _Tape:
    """The draws of one solve and draw, in order, the forward's and a backward pass's apart: (torch function, what
    was sampled) each."""

    forward: list[tuple[str, tuple]] = field(default_factory=list)
    backward: list[tuple[str, tuple]] = field(default_factory=list)
    closed: bool = False  # a run completed with these draws: later runs may not draw more


@dataclass
class _Store:
    drew: bool | None = None  # whether the step draws: None until a run has been watched
    tapes: dict[tuple[Hashable, int], _Tape] = field(default_factory=dict)
    short_run_drew: bool | None = None  # what the short run of the step drew (`short_run`); None: none ran


def _store(copies: ProblemCopies) -> _Store:
    if not isinstance(copies.draws, _Store):
        copies.draws = _Store()
    return copies.draws


def draws_anew(copies: ProblemCopies) -> bool:
    """Whether each draw number needs runs of its own (a reference too): the step draws, or no run has said yet."""
    return _store(copies).drew is not False


@contextmanager
def same_draws(
    copies: ProblemCopies, draw: int, solve: Hashable, record: DrawRecord | None = None
) -> Iterator[DrawRun]:
    """Run the body (one run of the step: forward and backward) on draw number `draw` of `solve` (what decides the
    order of the draws: the library, method and n_timesteps). Yields what the run drew. `record`: where the run keeps
    its draws, for re-runs of its calls (a watched run's)."""
    store, run = _store(copies), DrawRun()
    if store.drew is False:
        with _unmoved_generators(_LATE, numpy_and_python=True):
            yield run
        return
    tape = store.tapes.setdefault((solve, draw), _Tape())
    # Nothing drawn by the short run: this first run's backward is watched where its own forward drew.
    forward_decides = store.drew is None and store.short_run_drew is False
    replay = _Replay(run, tape, draw, record, forward_decides)
    unseen = lambda: _UNSEEN_IN_BACKWARD if replay.backward_unwatched else _UNSEEN  # noqa: E731
    with _seeded_globals(DRAW_SEED + draw, run), _unmoved_generators(unseen), _Watch(replay), _recording(record):
        yield run
    if run.complete:
        tape.closed = True
    if store.drew is None and (run.complete or run.drew):
        store.drew = run.drew


_SHORT_RUN = "short run"  # the short run's solves draw in an order of their own


@contextmanager
def short_run(copies: ProblemCopies) -> Iterator[DrawRun | None]:
    """Run the body (a short complete run of the step, forward and backward: a few steps of a solve the sweep makes
    anyway, on draw 0) watched whole as a first run is, before the step's first full run, so that the first full run
    does not pay for watching its backward where the step draws nothing. Yields the run (the caller sets `complete`),
    or None where a run has said already whether the step draws: then the body need not run. A short run that drew
    decides that the step draws; one that drew nothing leaves the first full run to decide, its backward watched only
    if its forward drew."""
    store = _store(copies)
    if store.drew is not None or store.short_run_drew is not None:
        yield None
        return
    with same_draws(copies, 0, _SHORT_RUN) as run:
        yield run
    if run.drew:
        store.drew = True  # same_draws has said so where the run completed; a failed run that drew says it too
    elif run.complete:
        store.drew = None  # the first full run decides, not the short one
        store.short_run_drew = False


@contextmanager
def _recording(record: DrawRecord | None) -> Iterator[None]:
    if record is None:
        yield
        return
    record.active = True
    try:
        yield
    finally:
        record.active = False


@dataclass(frozen=True)
class DrawMark:
    """Where a call began in a watched run's draws: how many it had drawn, and numpy's and Python's global generators
    then."""

    at: int
    numpy: Any
    python: Any


class DrawRecord:
    """The draws of one watched run, in order, each with what it sampled and the numbers: a re-run of one of its calls
    (`since(mark)`) is given the numbers that call drew. Keeps nothing unless a run replaying draws records into it."""

    def __init__(self) -> None:
        self.drawn: list[tuple[tuple[str, tuple], torch.Tensor]] = []
        self.active = False  # a run that replays draws is recording into it now
        self.redrawing = 0  # re-runs in progress: the run's own replay lets their draws through to theirs

    def mark(self) -> DrawMark | None:
        """Where a call begins; None where the run's draws are not recorded (it draws nothing)."""
        if not self.active:
            return None
        return DrawMark(len(self.drawn), np.random.get_state(legacy=True), random.getstate())

    def since(self, mark: DrawMark | None) -> CallDraws | None:
        """The draws of the call that began at `mark` and has just ended."""
        if mark is None or not self.active:
            return None
        return CallDraws(self, self.drawn[mark.at :], mark)


@dataclass(frozen=True)
class CallDraws:
    """What one call of a watched run drew: `replayed(f)` is `f` given those draws each time it is called."""

    record: DrawRecord
    drawn: list[tuple[tuple[str, tuple], torch.Tensor]]
    mark: DrawMark

    def replayed(self, function: Callable) -> Callable:
        def again(*args, **kwargs):
            with self._replaying():
                return function(*args, **kwargs)

        return again

    @contextmanager
    def _replaying(self) -> Iterator[None]:
        numpy_now, python_now = np.random.get_state(legacy=True), random.getstate()
        np.random.set_state(self.mark.numpy)
        random.setstate(self.mark.python)
        redraw = _Redraw(self.drawn)
        self.record.redrawing += 1
        try:
            with redraw:
                yield
        finally:
            self.record.redrawing -= 1
            np.random.set_state(numpy_now)
            random.setstate(python_now)
        if redraw.at < len(self.drawn):
            raise DrawMismatch(
                f"its re-run drew {redraw.at} of the {len(self.drawn)} random tensors its call drew, so it cannot "
                "stand for the call"
            )


# -- numpy's, Python's and torch's global generators ----------------------------------------------------------------


def _numpy_state_key(state: Any) -> tuple:
    name, keys, position, has_gauss, cached = state
    return (name, keys.tobytes(), position, has_gauss, cached)


@contextmanager
def _seeded_globals(seed: int, run: DrawRun) -> Iterator[None]:
    """numpy's and Python's global generators seeded for the run, and put back as they were after it."""
    numpy_before, python_before = np.random.get_state(legacy=True), random.getstate()
    np.random.seed(seed)
    random.seed(seed)
    numpy_seeded, python_seeded = np.random.get_state(legacy=True), random.getstate()
    try:
        yield
    finally:
        numpy_after, python_after = _numpy_state_key(np.random.get_state(legacy=True)), random.getstate()
        run.numpy = numpy_after != _numpy_state_key(numpy_seeded)
        run.python = python_after != python_seeded
        run.globals_after = (numpy_after, python_after)
        np.random.set_state(numpy_before)
        random.setstate(python_before)


def _torch_states() -> list[torch.Tensor]:
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else []
    return [torch.random.get_rng_state(), *cuda]


_LATE = (
    "the step drew random numbers in a run after its first run in this process drew none, so the runs cannot be "
    "given the same draws: draw in every call of the step, or not at all"
)
_UNSEEN = (
    "the step drew random numbers inside a torch operation that is not one of torch's random functions (an RNN's "
    "dropout between its layers, RReLU in training), which the sweep cannot give every run alike: draw them with "
    "torch's random functions (F.dropout between the layers)"
)
_UNSEEN_IN_BACKWARD = (
    "the step drew random numbers in a backward pass whose forward drew none, which a short run of it did not do, "
    "so the runs cannot be given the same draws: draw in every call of the step, or not at all"
)


@contextmanager
def _unmoved_generators(message: str | Callable[[], str], numpy_and_python: bool = False) -> Iterator[None]:
    """Torch's global generators (numpy's and Python's too, where asked) left as they were by the run; a draw from
    one of them stops the sweep with `message` (or what it gives, said once the run is over)."""

    def states() -> tuple:
        others = (_numpy_state_key(np.random.get_state(legacy=True)), random.getstate()) if numpy_and_python else ()
        return _torch_states(), others

    before = states()
    yield
    after = states()
    moved = before[1] != after[1] or len(before[0]) != len(after[0])
    if moved or not all(torch.equal(a, b) for a, b in zip(before[0], after[0])):
        raise InputError(message if isinstance(message, str) else message())


# -- torch's random functions --------------------------------------------------------------------------------------


def _bound(func: Any, args: tuple, kwargs: dict) -> dict[str, Any]:
    """The operation's arguments by name, defaults filled in."""
    bound: dict[str, Any] = {}
    for index, argument in enumerate(func._schema.arguments):
        if index < len(args) and not argument.kwarg_only:
            bound[argument.name] = args[index]
        elif argument.name in kwargs:
            bound[argument.name] = kwargs[argument.name]
        else:
            bound[argument.name] = argument.default_value if argument.has_default_value() else None
    return bound


def _draws_nothing(bound: dict[str, Any]) -> bool:
    """A seeded operation called so that it draws nothing (an attention or RNN with dropout 0, or not training)."""
    if bound.get("dropout_p") == 0 or bound.get("dropout") == 0:
        return True
    return bound.get("train") is False or bound.get("training") is False


# The torch functions that may draw (by name: `torch.randn`, `Tensor.normal_`, `F.dropout`, `nn.init.normal_`, ...).
# Only their calls pass through the replay, where the operations they dispatch are answered.
_MAY_DRAW = frozenset(
    {
        *("randn", "rand", "randint", "randperm", "randn_like", "rand_like", "randint_like", "normal", "normal_"),
        *("uniform_", "bernoulli", "bernoulli_", "exponential_", "random_", "multinomial", "poisson", "cauchy_"),
        *("log_normal_", "geometric_", "binomial", "rrelu", "rrelu_", "uniform", "exponential"),
        *("dropout", "dropout_", "dropout1d", "dropout2d", "dropout3d", "feature_dropout", "feature_dropout_"),
        *("alpha_dropout", "alpha_dropout_", "feature_alpha_dropout", "feature_alpha_dropout_"),
        *("fractional_max_pool2d", "fractional_max_pool3d", "gumbel_softmax", "_standard_gamma"),
    }
)


# The calls that start a backward pass, in which no torch function mode is active (autograd's engine runs without).
_BACKWARD = frozenset({"backward", "grad"})


class _Watch(TorchFunctionMode):
    """Sends the calls of torch functions that may draw through the replay, and every other call straight on: the
    replay sees each operation it dispatches, which costs an operation several times its own time, so only those.
    A backward pass runs whole inside the replay where the run's first complete run drew in its backward (a solver
    that evaluates a field that draws again), or no run has said yet."""

    def __init__(self, replay: _Replay) -> None:
        super().__init__()
        self.replay = replay

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        name = getattr(func, "__name__", None)
        if name in _MAY_DRAW or (name in _BACKWARD and self.replay.backward_draws()):
            with self.replay:
                return func(*args, **kwargs)
        return func(*args, **kwargs)


class _Answers(TorchDispatchMode):
    """Answers torch's random functions with the numbers `sample` gives, each transformed as the function asks."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch would wrap __torch_dispatch__ in dynamo's `disable`, whose first call imports torch._dynamo (about a
        # second of each process's first watched run): `_outside_dynamo` does the same only where dynamo is loaded.
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return _outside_dynamo(type(self)._dispatch)(self, func, types, args, kwargs)

    def _dispatch(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        replay = _REPLAYS.get(name)
        seeded = replay is not None or torch.Tag.nondeterministic_seeded in func.tags
        if not seeded:
            return func(*args, **kwargs)
        bound = _bound(func, args, kwargs)
        if replay is None and _draws_nothing(bound):
            return func(*args, **kwargs)
        if replay is None or "out" in bound or "out0" in bound:
            raise NotImplementedError(
                f"the step draws with torch's {func}, which the sweep cannot give every run alike (it gives "
                f"{', '.join(sorted(_REPLAYS))}, without out=)"
            )
        return replay(self, name, bound)

    def sample(self, function: str, kind: tuple, sampler: Callable[[torch.Generator], torch.Tensor]) -> torch.Tensor:
        raise NotImplementedError

    def normal(self, function: str, shape) -> torch.Tensor:
        size = tuple(int(s) for s in shape)
        return self.sample(function, ("normal", size), lambda g: torch.randn(size, generator=g, dtype=torch.float64))

    def uniform(self, function: str, shape) -> torch.Tensor:
        size = tuple(int(s) for s in shape)
        return self.sample(function, ("uniform", size), lambda g: torch.rand(size, generator=g, dtype=torch.float64))

    def integers(self, function: str, low: int, high: int, shape) -> torch.Tensor:
        size = tuple(int(s) for s in shape)
        return self.sample(
            function, ("integers", size, int(low), int(high)), lambda g: torch.randint(low, high, size, generator=g)
        )


_WITHOUT_DYNAMO: dict[Callable, Callable] = {}


def _outside_dynamo(function: Callable) -> Callable:
    """`function` where dynamo cannot be compiling (torch._dynamo not imported: torch.compile imports it); else, as
    torch wraps a dispatch mode's handler, with dynamo disabled in it: a compiled step does not trace into it."""
    dynamo = sys.modules.get("torch._dynamo")
    if dynamo is None:
        return function
    if function not in _WITHOUT_DYNAMO:
        _WITHOUT_DYNAMO[function] = dynamo.disable(function, recursive=True)
    return _WITHOUT_DYNAMO[function]


class _Replay(_Answers):
    """Answers the step's random functions from the draw's generators, checking them against the tape; kept in
    `record` where one is given."""

    def __init__(
        self, run: DrawRun, tape: _Tape, draw: int, record: DrawRecord | None = None, forward_decides: bool = False
    ) -> None:
        super().__init__()
        self.run, self.tape, self.draw, self.record = run, tape, draw, record
        self.forward_at, self.backward_at = 0, 0
        self.backward_pass = -1  # the autograd graph task of the backward pass drawing now
        # Whether a backward pass of a first run is watched only where its forward drew (`short_run`).
        self.forward_decides = forward_decides
        self.backward_unwatched = False  # a backward pass ran unwatched because of that

    def _dispatch(self, func, types, args=(), kwargs=None):
        if self.record is not None and self.record.redrawing:
            return func(*args, **(kwargs or {}))  # a re-run of a call: its own replay answers it
        return super()._dispatch(func, types, args, kwargs)

    def backward_draws(self) -> bool:
        """Whether a backward pass may draw: its tape says so, or is not complete yet (and, where the short run drew
        nothing, the forward drew)."""
        if self.tape.backward:
            return True
        if self.tape.closed:
            return False
        if self.forward_decides and not self.run.functions:
            self.backward_unwatched = True
            return False
        return True

    def sample(self, function: str, kind: tuple, sampler: Callable[[torch.Generator], torch.Tensor]) -> torch.Tensor:
        """The next draw: `kind` says what is sampled (and its shape); the values come from its position's generator.
        A draw inside a backward pass (the solver evaluating the field again) is counted from that pass's start."""
        task = torch._C._current_graph_task_id()
        backward = task != -1
        if backward and task != self.backward_pass:
            self.backward_pass, self.backward_at = task, 0
        drawn = self.tape.backward if backward else self.tape.forward
        at = self.backward_at if backward else self.forward_at
        signature = (function, kind)
        where = f"{'backward pass' if backward else 'forward'} of the run"
        if at < len(drawn):
            if drawn[at] != signature:
                raise DrawMismatch(
                    f"random draw {at + 1} in the {where} is {function} {_kind_words(kind)}, where the first complete "
                    f"run drew {drawn[at][0]} {_kind_words(drawn[at][1])}: the runs draw differently, so they cannot "
                    "be given the same numbers"
                )
        elif self.tape.closed:
            raise DrawMismatch(
                f"the {where} draws more random tensors than the first complete run of its solve ({len(drawn)}; this "
                f"one: {function} {_kind_words(kind)}): a solver's retry of a step or an adaptive method's extra steps "
                "evaluate a vector field that draws again, so the runs cannot see the same numbers; draw the noise in "
                "the step, outside the solve"
            )
        else:
            drawn.append(signature)
        if backward:
            self.backward_at += 1
        else:
            self.forward_at += 1
        values = sampler(draw_generator(self.draw, at, backward))
        self.run.functions[function] += 1
        self.run.numbers += values.numel()
        if self.record is not None:
            self.record.drawn.append((signature, values.clone()))  # the run may write into what it is handed
        return values


class _Redraw(_Answers):
    """Answers a re-run of one call with the numbers the call drew, in order, checking each is sampled alike."""

    def __init__(self, drawn: list[tuple[tuple[str, tuple], torch.Tensor]]) -> None:
        super().__init__()
        self.drawn, self.at = drawn, 0

    def sample(self, function: str, kind: tuple, sampler: Callable[[torch.Generator], torch.Tensor]) -> torch.Tensor:
        if self.at >= len(self.drawn) or self.drawn[self.at][0] != (function, kind):
            drew = (
                f"{self.drawn[self.at][0][0]} {_kind_words(self.drawn[self.at][0][1])}"
                if self.at < len(self.drawn)
                else "nothing more"
            )
            raise DrawMismatch(
                f"its re-run's random draw {self.at + 1} is {function} {_kind_words(kind)}, where its call drew {drew}"
            )
        self.at += 1
        return self.drawn[self.at - 1][1].clone()


def _kind_words(kind: tuple) -> str:
    what, size, *bounds = kind
    return f"({what} of shape {size}{f' in [{bounds[0]}, {bounds[1]})' if bounds else ''})"


def _factory(bound: dict[str, Any], default: torch.dtype | None = None) -> dict[str, Any]:
    dtype = bound.get("dtype")  # a schema's default dtype comes as a number: randint's int64
    chosen = dtype if isinstance(dtype, torch.dtype) else default or torch.get_default_dtype()
    return {"dtype": chosen, "device": bound["device"]}


def _like(bound: dict[str, Any]) -> dict[str, Any]:
    like, dtype, device = bound["self"], bound.get("dtype"), bound.get("device")
    return {"dtype": like.dtype if dtype is None else dtype, "device": like.device if device is None else device}


def _into(self: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """An in-place draw's result: `values` (float64 or bool, on the CPU) written into `self`, cast to its dtype."""
    return self.copy_(values.to(self.device))


def _below(uniform: torch.Tensor, p: object, device: torch.device) -> torch.Tensor:
    """Bernoulli outcomes: 1 where the uniform draw falls below the probability (a number, or a tensor in the run's
    precision, compared in float64)."""
    if isinstance(p, torch.Tensor):
        return uniform.to(p.device) < p.to(torch.float64)
    return (uniform < float(p)).to(device)  # type: ignore[arg-type]


def _normal_out_of_place(replay: _Answers, name: str, bound: dict[str, Any]) -> torch.Tensor:
    mean, std = bound["mean"], bound["std"]
    tensors = [x for x in (mean, std) if isinstance(x, torch.Tensor)]
    if not tensors:  # normal(mean, std, size)
        return (replay.normal(name, bound["size"]) * std + mean).to(**_factory(bound))
    shape = torch.broadcast_shapes(*(x.shape for x in tensors))
    z = replay.normal(name, shape).to(device=tensors[0].device, dtype=tensors[0].dtype)
    return mean + std * z


def _randint_like(replay: _Answers, name: str, bound: dict[str, Any]) -> torch.Tensor:
    low = bound.get("low") or 0
    high = bound["high"]
    high = int(high.item()) if isinstance(high, torch.Tensor) else high
    return replay.integers(name, low, high, bound["self"].shape).to(**_like(bound))


def _random_in_place(replay: _Answers, name: str, bound: dict[str, Any]) -> torch.Tensor:
    low, high = (bound["from"], bound["to"]) if "from" in bound else (0, bound.get("to"))
    if high is None:
        raise NotImplementedError(
            "the step draws with random_() without an upper bound, whose range depends on the tensor's dtype: give "
            "random_(from, to), or draw with randint"
        )
    self = bound["self"]
    return _into(self, replay.integers(name, low, high, self.shape))


def _dropout(replay: _Answers, name: str, bound: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    x, p, train = bound["input"], float(bound["p"]), bound["train"]
    if train is False or p == 0:
        return x.clone(), torch.ones_like(x, dtype=torch.bool)
    keep = _below(replay.uniform(name, x.shape), 1 - p, x.device)
    return x * keep * (1 / (1 - p) if p < 1 else 0.0), keep


def _bernoulli(replay: _Answers, name: str, bound: dict[str, Any]) -> torch.Tensor:
    self = bound["self"]
    p = bound.get("p", self)  # bernoulli(p): the tensor holds the probabilities
    return _below(replay.uniform(name, self.shape), p, self.device).to(self.dtype)


def _uniform_values(replay: _Answers, name: str, bound: dict[str, Any]) -> torch.Tensor:
    low, high = bound["from"], bound["to"]
    return replay.uniform(name, bound["self"].shape) * (high - low) + low


def _exponential_values(replay: _Answers, name: str, bound: dict[str, Any]) -> torch.Tensor:
    return -torch.log1p(-replay.uniform(name, bound["self"].shape)) / bound["lambd"]


_Replayer = Callable[[_Answers, str, dict[str, Any]], Any]
_REPLAYS: dict[str, _Replayer] = {
    "randn": lambda r, n, b: r.normal(n, b["size"]).to(**_factory(b)),
    "randn_like": lambda r, n, b: r.normal(n, b["self"].shape).to(**_like(b)),
    "rand": lambda r, n, b: r.uniform(n, b["size"]).to(**_factory(b)),
    "rand_like": lambda r, n, b: r.uniform(n, b["self"].shape).to(**_like(b)),
    "randint": lambda r, n, b: r.integers(n, b.get("low") or 0, b["high"], b["size"]).to(**_factory(b, torch.int64)),
    "randint_like": _randint_like,
    "randperm": lambda r, n, b: r.sample(
        n, ("permutation", int(b["n"])), lambda g: torch.randperm(int(b["n"]), generator=g)
    ).to(**_factory(b, torch.int64)),
    "normal": _normal_out_of_place,
    "normal_": lambda r, n, b: _into(b["self"], r.normal(n, b["self"].shape) * b["std"] + b["mean"]),
    "uniform": lambda r, n, b: _uniform_values(r, n, b).to(device=b["self"].device, dtype=b["self"].dtype),
    "uniform_": lambda r, n, b: _into(b["self"], _uniform_values(r, n, b)),
    "bernoulli": _bernoulli,
    "bernoulli_": lambda r, n, b: _into(b["self"], _below(r.uniform(n, b["self"].shape), b["p"], torch.device("cpu"))),
    "native_dropout": _dropout,
    "exponential": lambda r, n, b: _exponential_values(r, n, b).to(device=b["self"].device, dtype=b["self"].dtype),
    "exponential_": lambda r, n, b: _into(b["self"], _exponential_values(r, n, b)),
    "random_": _random_in_place,
}
