"""Which module: each module of the model watched over one run, per time step, forward and backward.

For every leaf module (and the root as a whole: the vector field, named VECTOR_FIELD, of a trajectory problem; a
training step's whole model, WHOLE_MODEL), over the run's calls:
- the largest magnitude of its outputs (forward) and of the gradients reaching them (backward), the smallest nonzero
  one, and the share of nonzero values below the dtype's smallest normal; a call's outputs are every floating tensor
  it returns (a GRU's `(output, h_n)`: the gradient reaching either counts);
- its local roundoff: the module re-run in float64 (a float64 copy of its weights) on the very input the run gave it,
  against the run's output; backward, the vector-Jacobian product with the very gradients that reached its outputs,
  recomputed in the run's precision and in float64. So the error the module adds, not the error it inherits
  (local_error.py). A call that drew random numbers (dropout in training mode, `randn_like`) is re-run on the numbers
  it drew (draws.py), not on new ones; a re-run that draws otherwise is not measured, and its row says so. Over every
  call, and apart over the calls whose values reach the dtype's normal range: a call
  whose every value (its outputs forward, the gradients reaching them backward) lies below the smallest normal
  computes on subnormals, held with fewer digits, and its relative error says how small they are more than what it
  adds to the gradient;
- the first time step where its output (or the gradient reaching it) held a non-finite value.

What public code does around the hooks is measured too, or said: a module that writes into its input is re-run on a
copy of the input taken before the call (call_inputs.py); a torch operation that uses a module's weights outside the
module's call (`torch.mm(layer.weight.t(), x)`, `layer.forward(x)`) is one more call of that module (outside_calls.py),
and a module that holds weights of its own without being a leaf (the root too, for calls outside its own) gets a row
for such calls; a module whose weights took a gradient while no call using them was seen (a use no hook and no torch
function mode sees: TorchScript) gets a row that says so; a call whose outputs no gradient reached, in a backward that
ran to its end, adds no local error (the loss does not depend on it); a call whose recomputation failed is counted in
the row's `measurement`, never dropped in silence.

A call's time step is the step of its solve's time grid whose interval holds the call's t (the vector field's first
argument); backward steps are counted as the backward walk counts them, 0 being the last time step (as the results'
overflow_step). A call outside any solve (a training step's encoder or decoder) has no time step.
The observer watches one run, made for it and not timed: the float64 re-runs cost a multiple of the run itself.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import nn

from ..axes.keep_float32 import in_kept_region, is_kept
from ..axes.parameter_uses import ParameterUses, direct_owners
from ..core.errors import one_line
from . import metrics
from .call_inputs import CallInputs, SavedInputs
from .columns import COMPLETE, VECTOR_FIELD
from .draws import CallDraws, DrawMark, DrawMismatch, DrawRecord
from .local_error import NotMeasured, Recomputed, backward_error, floating_outputs, forward_error, in_low_precision
from .outside_calls import OutsideCalls

IN_PLACE = "in place: not measured"  # a call that wrote into its input before a copy of it was taken
# A call whose re-run drew other random numbers than the call did (another function or shape, more or fewer draws).
DRAWS_OTHERWISE = "not measured: draws random numbers, and its re-run drew otherwise than its call"
# A module whose weights took a gradient in the watched run while none of the calls that used them was seen.
UNSEEN_USE = (
    "not measured: its weights took a gradient, but no call that used them was seen (an operation no module hook and "
    "no torch function mode sees, such as TorchScript code)"
)


@dataclass
class _Call:
    """One forward call whose output takes a gradient: whether a gradient reached it."""

    reached: bool = False


@dataclass
class ModuleStats:
    max_abs: float = 0.0
    min_abs: float = math.inf  # smallest nonzero magnitude
    below_normal: int = 0
    nonzero: int = 0
    # The local error of each measured call, its call, and whether its every value lay below the smallest normal.
    errors: list[tuple[float, _Call | None, bool]] = field(default_factory=list)
    first_nonfinite_step: int | None = None
    first_nonfinite_call: int | None = None  # the run's count of watched calls then: orders modules within one step
    n_calls: int = 0
    produced_nonfinite: bool = False  # a non-finite value began here, from finite ones (see `produced`)
    n_outside: int = 0  # calls that were operations on its weights outside its own call
    calls: list[_Call] = field(default_factory=list)  # forward: the calls whose output takes a gradient
    not_measured: Counter[str] = field(default_factory=Counter)  # why a call's local error was not recomputed
    n_below_normal: int = 0  # calls whose every nonzero value lay below the smallest normal

    def add(self, values: list[torch.Tensor], step: int | None, smallest_normal: float, call: int) -> float | None:
        """Fold one call's outputs (or the gradients reaching them) in: their largest magnitude, None where one held a
        non-finite value."""
        self.n_calls += 1
        magnitudes = [value.detach().abs() for value in values]
        if not all(bool(torch.isfinite(m).all()) for m in magnitudes):
            if self.first_nonfinite_step is None:
                self.first_nonfinite_step, self.first_nonfinite_call = step, call
            self.max_abs = math.inf
            return None
        largest = 0.0
        for magnitude in magnitudes:
            if magnitude.numel():
                largest = max(largest, float(magnitude.max()))
                nonzero = magnitude[magnitude > 0]
                if nonzero.numel():
                    self.min_abs = min(self.min_abs, float(nonzero.min()))
                    self.nonzero += nonzero.numel()
                    self.below_normal += int((nonzero < smallest_normal).sum())
        self.max_abs = max(self.max_abs, largest)
        self.n_below_normal += 0 < largest < smallest_normal
        return largest

    def produced(self, step: int | None, call: int) -> None:
        """Its own computation turned finite values non-finite (forward: its output from finite inputs; backward: the
        gradient it passed on, to its inputs and parameters, from a finite gradient at its output)."""
        if not self.produced_nonfinite:
            self.produced_nonfinite = True
            if self.first_nonfinite_call is None or self.first_nonfinite_call > call:  # set with the step
                self.first_nonfinite_step, self.first_nonfinite_call = step, call

    def add_error(self, error: float, call: _Call | None = None, below_normal: bool = False) -> None:
        if math.isfinite(error):
            self.errors.append((error, call, below_normal))

    def missed(self, why: str) -> None:
        self.not_measured[why] += 1

    def local_rel_err(self, backward_done: bool, normal_range_only: bool = False) -> float | None:
        """The largest local error over the calls (`normal_range_only`: over those whose values reach the normal
        range); after a backward that ran to its end, over the calls the loss depends on."""
        errors = [
            e
            for e, call, below in self.errors
            if not (backward_done and call is not None and not call.reached) and not (normal_range_only and below)
        ]
        return max(errors) if errors else None

    def measurement(self, stopped: str | None) -> str:
        said = [f"{why} ({n} of {self.n_calls} calls)" for why, n in self.not_measured.items()]
        return "; ".join(said + ([stopped] if stopped else [])) or COMPLETE


def _described(exc: BaseException) -> str:
    line = one_line(exc)
    return line if len(line) <= 200 else line[:199] + "…"


def _writes_in_place(func, kwargs: dict) -> bool:
    """Whether a torch operation writes into an input, by torch's naming (`add_`, `__iadd__`) or an `out=`."""
    name = getattr(func, "__name__", "")
    return (name.endswith("_") and not name.endswith("__")) or name.startswith("__i") or "out" in kwargs


class RunSolves(Protocol):
    """The watched run's solves as its modules' recomputations need them (one_run.RecomputedSolves)."""

    def solving(self) -> bool:
        """Whether the run's solver is solving now: a call made then had its torchdiffeq calls answered by
        torchdiffeq's own."""
        ...

    def recomputing(self, module: nn.Module | None, float64: bool, route: bool) -> AbstractContextManager:
        """The block a recomputation of one call of `module` runs in: its solves as the run's, in float64 where asked;
        `route`: torchdiffeq's names routed for it (where no step's routing holds)."""
        ...


class ModuleObserver:
    """Hooks on the leaf modules of `root` (and `root` itself, its row named `root_name`) for one run: the vector field
    of a trajectory problem, the whole model of a training step. `context` re-creates the run's precision (its autocast
    or emulation), for the backward's recomputation. Each solve hands its vector field (as the solver calls it) and its
    grid to `watch_field`: a call's t maps to its time step on that grid; calls outside any solve (an encoder, a
    decoder) have no time step."""

    def __init__(
        self,
        root: nn.Module,
        dtype_max: float,
        smallest_normal: float,
        context: Callable[[], AbstractContextManager],
        root_name: str = VECTOR_FIELD,
    ) -> None:
        self.root, self.root_name = root, root_name
        self.n_steps = 1  # of the solve whose field is running, or ran last
        self.dtype_max, self.smallest_normal = dtype_max, smallest_normal
        self.context = context
        # The modules whose output is a tensor of their own computing, by qualified name; containers only route.
        self.modules = {
            name or root_name: m for name, m in root.named_modules() if not name or not any(True for _ in m.children())
        }
        # Every module with a row: the hooked ones, and the containers that hold weights of their own.
        owners = direct_owners(root, root_name)
        self.owners = {
            name or root_name: m
            for name, m in root.named_modules()
            if (name or root_name) in self.modules or (name or root_name) in owners
        }
        # Weights used where their module's call is not running: the root's own too (a method of the model that is
        # not its forward, OT-Flow's `Phi.trHess` using `Phi.A`), measured as calls of the root.
        self.uses = ParameterUses(owners)
        self._owner_of = {id(p): n for n, m in owners.items() for p in m._parameters.values() if p is not None}
        self._took_gradient: set[str] = set()  # owners whose weights took a gradient in the run's backward
        self._measured_in_others: set[str] = set()  # owners whose weights an operation counted as another's used
        # float64 copies, made before any hook is attached; a kept-in-float32 forward is copied
        # too, and leaves float64 as it is.
        self.float64 = {name: _float64_copy(m) for name, m in self.modules.items()}
        self._recomputed: dict[str, Recomputed] = {}
        self.stats = {(name, phase): ModuleStats() for name in self.owners for phase in ("forward", "backward")}
        self.phase = "forward"
        self.step: int | None = None  # the time step of the field's call running now; None outside the solves
        self._busy = False  # set while a module is re-run: the re-run's own calls are not the run's
        self._running: Counter[str] = Counter()  # the hooked calls running now
        self._in_field = 0  # calls of a solve's vector field running now
        self._watching_outside = 0  # OutsideCalls modes entered and not left
        self._inputs: dict[str, list[tuple[CallInputs, DrawMark | None]]] = {name: [] for name in self.modules}
        # The run's random draws, handed to the run (one_run.py): each re-run of a call is given the call's.
        self.draws = DrawRecord()
        self._in_place: set[str] = set()  # modules seen writing into their input: their inputs are copied first
        self._kept: set[str] = set()  # modules called inside a kept module or method
        self._backward_done = False
        self._stopped: str | None = None
        self._unwatched: dict[str, str] = {}  # modules that refused hooks, and why
        self._in_graph = True  # whether the field's current call was made with autograd on
        self._last_backward_step = -1
        self._earlier_passes: list[dict[tuple[str, str], ModuleStats]] = []  # backward passes before the current one
        self.calls = 0  # watched calls so far, forward then backward (a hook's output counts once it is done)
        self._handles: list = []
        self._solves: RunSolves | None = None  # the watched run's, which its modules' calls solved with

    def solving_with(self, solves: RunSolves) -> None:
        """The watched run's solves: a call made outside them (a whole model, an ODEBlock, whose own code calls
        torchdiffeq) is recomputed with the solve the run routed it to (`_routed`)."""
        self._solves = solves

    @contextmanager
    def attached(self) -> Iterator[ModuleObserver]:
        for name, module in self.modules.items():
            try:
                pre = module.register_forward_pre_hook(self._pre_hook(name), with_kwargs=True)
            except RuntimeError as exc:  # a TorchScript module takes no hooks: it cannot be watched
                self._unwatched[name] = unwatched(exc)
                continue
            self._handles.append(pre)
            self._handles.append(
                module.register_forward_hook(self._forward_hook(name), with_kwargs=True, always_call=True)
            )
        for parameter in self.root.parameters():
            if parameter.requires_grad and id(parameter) in self._owner_of:
                self._handles.append(parameter.register_hook(self._weight_hook(self._owner_of[id(parameter)])))
        try:
            yield self
        finally:
            for handle in self._handles:
                handle.remove()
            self._handles.clear()

    def _weight_hook(self, owner: str):
        def hook(grad: torch.Tensor) -> None:
            if not (self._busy or self.phase == "forward" or self._in_field):
                self._took_gradient.add(owner)

        return hook

    def watch_field(self, field: nn.Module, grid: torch.Tensor) -> None:
        """One solve's vector field as the solver calls it, and the solve's grid (either direction): its calls set the
        time step, and inside them operations on weights outside their modules' calls are counted (`watching_weights`,
        entered after the run's own precision, so that they are seen as that precision leaves them)."""
        points = grid.detach().double().cpu()
        descending = points.numel() > 1 and bool(points[-1] < points[0])
        keys = -points if descending else points
        n_steps = max(points.numel() - 1, 1)

        def entering(module, args) -> None:
            self._in_field += 1
            self._on_call(args, keys, -1.0 if descending else 1.0, n_steps)

        def leaving(module, args, output) -> None:
            self._in_field -= 1
            if not self._in_field:
                self.step = None

        self._handles.append(field.register_forward_pre_hook(entering))
        self._handles.append(field.register_forward_hook(leaving, always_call=True))
        if self.uses:
            forward = field.forward

            def watched(*args, **kwargs):
                with self.watching_weights():
                    return forward(*args, **kwargs)

            field.__dict__["forward"] = watched  # the field's wrapper is the solve's own: it ends with it

    @contextmanager
    def watching_weights(self) -> Iterator[None]:
        """Operations on weights outside their modules' calls are counted in the block (once, however nested)."""
        if self._watching_outside or not self.uses:
            yield
            return
        self._watching_outside += 1
        try:
            with OutsideCalls(self.uses, self):
                yield
        finally:
            self._watching_outside -= 1

    def begin_backward(self) -> None:
        self.phase = "backward"

    def keep_backward_pass(self, passes_after: int) -> None:
        """Keep the statistics of the backward pass that counted, `passes_after` passes before the last."""
        if 0 < passes_after <= len(self._earlier_passes):  # (passes of one step each are not told apart)
            self.stats.update(self._earlier_passes[-passes_after])
        self._earlier_passes.clear()
        self._backward_done = True

    def stopped(self, why: str) -> None:
        """The watched run ended before the run it stands for did (a time limit): every row says so."""
        self._stopped = why

    def _on_call(self, args: tuple, keys: torch.Tensor, direction: float, n_steps: int) -> None:
        if self._busy:
            return
        self.n_steps = n_steps
        # A solver that steps without autograd (the native forward) leaves its calls out of the loss's graph, whatever
        # the field does inside: whether a gradient reaches them then says nothing of what the loss depends on.
        self._in_graph = torch.is_grad_enabled()
        if not args:
            return
        t = args[0]
        value = (
            float(t.detach().reshape(-1)[0])
            if isinstance(t, torch.Tensor) and t.numel()
            else t
            if isinstance(t, (int, float))
            else None
        )
        if value is not None:
            at = torch.tensor([direction * value], dtype=torch.float64)
            index = int(torch.searchsorted(keys, at, right=True)[0]) - 1
            self.step = min(max(index, 0), n_steps - 1)

    # -- the hooked calls and the operations on weights outside them -----------------------------------------------

    def _pre_hook(self, name: str):
        def hook(module, args, kwargs) -> None:
            if self._busy:
                return
            self._running[name] += 1
            # The forward's float64 copies are taken before the call: a module may write into its input.
            forward = self.phase == "forward"
            taken = CallInputs.before(args, kwargs, float64=forward, copy=name in self._in_place)
            self._inputs[name].append((taken, self.draws.mark()))

        return hook

    def _forward_hook(self, name: str):
        def hook(module, args, kwargs, output) -> None:
            if self._busy or not self._inputs[name]:
                return
            self._running[name] -= 1
            inputs, mark = self._inputs[name].pop()
            if inputs.overwritten():
                self._in_place.add(name)
            self._measure(name, self._module_recomputed(name), inputs, output, self.draws.since(mark))

        return hook

    def watching(self) -> bool:
        return not self._busy

    def running(self, name: str) -> bool:
        return self._running[name] > 0

    def before_outside_call(self, func, args: tuple, kwargs: dict) -> tuple[CallInputs, DrawMark | None]:
        # Inputs an operation leaves as they were are copied after it, as the modules' are; one that writes into them
        # is copied first.
        in_place = _writes_in_place(func, kwargs)
        taken = CallInputs.before(args, kwargs, float64=in_place and self.phase == "forward", copy=in_place)
        return taken, self.draws.mark()

    def outside_call(
        self, owner: str, func, taken: tuple[CallInputs, DrawMark | None], out: Any, owners: list[str]
    ) -> None:
        # The other owners' weights are measured in this call (nn.MultiheadAttention's functional forward takes its
        # own projection's and its `out_proj`'s).
        self._measured_in_others.update(owners)
        self.stats[(owner, "forward")].n_outside += self.phase == "forward" and bool(floating_outputs(out))
        inputs, mark = taken
        self._measure(owner, Recomputed(func, func), inputs, out, self.draws.since(mark))

    def _module_recomputed(self, name: str) -> Recomputed:
        if name not in self._recomputed:
            module, module64 = self.modules[name], self.float64[name]
            self._recomputed[name] = Recomputed(
                module,
                module64,
                {n: p for n, p in module.named_parameters() if p.requires_grad},
                dict(module64.named_parameters()),
            )
        return self._recomputed[name]

    def _measure(
        self, name: str, recomputed: Recomputed, inputs: CallInputs, output: Any, drawn: CallDraws | None
    ) -> None:
        """One call's statistics and local errors; `drawn`: what the call drew, given to each re-run of it (None where
        the run's draws are not recorded: it draws nothing)."""
        outs = floating_outputs(output)
        if not outs:
            return
        recomputed = self._routed(recomputed)
        if drawn is not None:
            low, high = drawn.replayed(recomputed.low), drawn.replayed(recomputed.float64)
            recomputed = dataclasses.replace(recomputed, low=low, float64=high)
        step = self.step
        in_place = inputs.overwritten()
        if in_kept_region():
            self._kept.add(name)
        before = inputs.as_before()
        # A library that solves the forward without autograd evaluates the field again in the backward, with it:
        # those calls are not the forward's, but the gradient reaching their outputs is the backward's.
        forward = self.stats[(name, "forward")]
        call = None
        # The outputs a gradient can reach, by their position among the call's floating outputs.
        graded = [i for i, out in enumerate(outs) if out.requires_grad]
        if self.phase == "forward":
            self.calls += 1
            largest = forward.add(outs, step, self.smallest_normal, self.calls)
            if largest is None and before is not None and metrics.all_finite(_floating(before)):
                forward.produced(step, self.calls)
            if graded and self._in_graph:
                call = _Call()
                forward.calls.append(call)
            if largest is not None:
                below = 0 < largest < self.smallest_normal
                self._forward_error(forward, recomputed, inputs, outs, in_place, call, below)
        if graded:
            saved = None if before is None else SavedInputs.of(before, inputs.requires_grad)
            hook = self._gradient_hook(name, recomputed, step, saved, in_low_precision(), in_place, call, graded)
            # Once per backward pass, with the gradients of every output it reached (None for the others).
            torch.autograd.graph.register_multi_grad_hook([outs[i] for i in graded], hook)

    def _routed(self, recomputed: Recomputed) -> Recomputed:
        """A call made outside the run's solves, recomputed with every solve it makes routed as the run's were: the
        run's library, method and steps, in the run's precision and in float64 (solve_calls.ConfiguredOdeint
        .recomputing). A call made while the run solved, or in its backward (a library's re-evaluation of the
        field), is left as it is: the torchdiffeq calls it made were torchdiffeq's own (the run's solver solving, or
        no routing in the backward), in the run as in its recomputation."""
        solves = self._solves
        if solves is None or solves.solving() or self.phase != "forward":
            return recomputed
        low, high = self._solving(solves, recomputed.low, False), self._solving(solves, recomputed.float64, True)
        return dataclasses.replace(recomputed, low=low, float64=high)

    def _solving(self, solves: RunSolves, call: Callable, float64: bool) -> Callable:
        module = call if isinstance(call, nn.Module) else None

        def routed(*args, **kwargs):
            # The forward's recomputations run inside the step, whose routing answers with the run's odeint; the
            # backward's run after it, and route their own.
            with solves.recomputing(module, float64, route=self.phase != "forward"):
                return call(*args, **kwargs)

        return routed

    def _forward_error(
        self,
        stats: ModuleStats,
        recomputed: Recomputed,
        inputs: CallInputs,
        outs: list[torch.Tensor],
        in_place: bool,
        call,
        below_normal: bool,
    ) -> None:
        self._busy = True
        try:
            inputs64 = inputs.float64_inputs()
            if inputs64 is None:
                stats.missed(IN_PLACE)
            else:
                stats.add_error(forward_error(recomputed, inputs64, outs, in_place), call, below_normal)
        except NotMeasured as exc:
            stats.missed(f"float64 re-run: {exc}")
        except DrawMismatch:
            stats.missed(DRAWS_OTHERWISE)
        except Exception as exc:  # noqa: BLE001 - the user's code refused the re-run: the row says so, the run goes on
            stats.missed(f"float64 re-run failed: {_described(exc)}")
        finally:
            self._busy = False

    def _gradient_hook(
        self,
        name: str,
        recomputed: Recomputed,
        step: int | None,
        saved: SavedInputs | None,
        low: bool,
        in_place: bool,
        call: _Call | None,
        positions: list[int],
    ):
        backward_step = None if step is None else self.n_steps - 1 - step

        def hook(grads: Sequence[torch.Tensor | None]) -> None:
            # Before the run's backward, or while the field runs, a gradient is the field's own (a divergence taken by
            # autograd inside its forward), not the run's backward.
            if self._busy or self.phase == "forward" or self._in_field:
                return
            reached = {position: g for position, g in zip(positions, grads) if g is not None}
            if not reached:
                return
            if call is not None:
                call.reached = True
            if backward_step is not None and backward_step < self._last_backward_step:
                # A new backward pass (a loss scaler's search): each pass's statistics are kept apart, and the run
                # says which one counted (keep_backward_pass), as for its profile.
                self._earlier_passes.append({key: stats for key, stats in self.stats.items() if key[1] == "backward"})
                self.stats.update({key: ModuleStats() for key in self._earlier_passes[-1]})
            if backward_step is not None:
                self._last_backward_step = backward_step
            stats = self.stats[(name, "backward")]
            self.calls += 1
            largest = stats.add(list(reached.values()), backward_step, self.smallest_normal, self.calls)
            if largest is None:
                return
            if saved is None:
                stats.missed(IN_PLACE)
                return
            if saved.overwritten():
                stats.missed("its input was overwritten in place after the call: not measured")
                return
            self._busy = True
            try:
                error, produced = backward_error(recomputed, saved, reached, self.context if low else None, in_place)
            except NotMeasured as exc:
                stats.missed(f"backward recomputation: {exc}")
                return
            except DrawMismatch:
                stats.missed(DRAWS_OTHERWISE)
                return
            except Exception as exc:  # noqa: BLE001 - the user's code refused the recomputation: said in the row
                stats.missed(f"backward recomputation failed: {_described(exc)}")
                return
            finally:
                self._busy = False
            if error is not None:
                stats.add_error(error, below_normal=0 < largest < self.smallest_normal)
            if produced:
                stats.produced(backward_step, self.calls)

        return hook

    def rows(self) -> list[dict]:
        """One row per module and phase, in the order the modules are declared (the vector field's first)."""
        rows = []
        for (name, phase), stats in self.stats.items():
            unseen = name in self._took_gradient and name not in self._measured_in_others
            if phase == "forward" and not stats.n_calls and (name in self._unwatched or unseen):
                why = self._unwatched.get(name, UNSEEN_USE)
                rows.append({"module": name, "phase": phase, "n_calls": 0, "measurement": why})
                continue
            if not stats.n_calls:
                continue
            max_abs = stats.max_abs
            forward = self.stats[(name, "forward")]
            rows.append(
                {
                    "module": name,
                    "phase": phase,
                    "n_calls": stats.n_calls,
                    "kept_float32": is_kept(self.owners[name]) or name in self._kept,
                    "max_abs": max_abs,
                    "max_abs_over_dtype_max": max_abs / self.dtype_max,
                    "min_abs": stats.min_abs if math.isfinite(stats.min_abs) else None,
                    "below_normal_share": stats.below_normal / stats.nonzero if stats.nonzero else None,
                    "local_rel_err": stats.local_rel_err(self._backward_done),
                    "local_rel_err_normal_range": stats.local_rel_err(self._backward_done, normal_range_only=True),
                    "n_calls_below_normal": stats.n_below_normal,
                    "first_nonfinite_step": stats.first_nonfinite_step,
                    "first_nonfinite_call": stats.first_nonfinite_call,
                    "produced_nonfinite": stats.produced_nonfinite,
                    "n_calls_outside": forward.n_outside if phase == "forward" else None,
                    "n_calls_unused": (
                        sum(not c.reached for c in stats.calls) if phase == "forward" and self._backward_done else None
                    ),
                    "measurement": stats.measurement(self._stopped),
                }
            )
        return rows


def unwatched(exc: Exception) -> str:
    """A row's measurement where a module (or the model) could not be watched at all."""
    return f"not watched: {_described(exc).removeprefix('RuntimeError: ')}"


def _floating(inputs: tuple[tuple, dict]) -> list[torch.Tensor]:
    args, kwargs = inputs
    return [t for t in (*args, *kwargs.values()) if isinstance(t, torch.Tensor) and t.is_floating_point()]


def _float64_copy(module: nn.Module) -> nn.Module:
    duplicate = copy.deepcopy(module).double()
    for sub in duplicate.modules():
        sub._forward_hooks.clear()  # none of ours is attached yet; a user's hook would count the re-runs as calls
        sub._forward_pre_hooks.clear()
    return duplicate
