"""A watch inside the user's own training loop: `w = watch(model, step, every=N, out=FOLDER)`, then `w(iteration,
batch)` in the loop. At the first call and every N iterations it measures the user's step on the current weights and
that batch as one row of a sweep measures a configuration (the low-precision run against its float64 reference by
`one_run.run_once`, the errors by `rows.run_columns`, the gradient noise by `gradient_noise`, from batches of the
iterations just before, kept for it), adds the overflow margin, appends the row to `FOLDER/watch.parquet`, and warns
with a `RoundoffWarning` (raises it where `raise_on` names the reason) when the training leaves what the verdict calls
safe for training.

Everything is measured on copies: the user's weights, gradients, optimizer, autocast state, grad mode and random
generators (torch's, numpy's, Python's) are as they were after each call, so the watched training is bit-identical to
the unwatched one. A measurement's run and its reference are given draw 0 of the step's random numbers, as a sweep's
are (draws.py); the noise batches' runs draw the watch's own.
"""

from __future__ import annotations

import copy
import math
import random
import time
import warnings
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils import _pytree as pytree

from ..axes.arithmetics import ArithmeticRequest
from ..axes.dtypes import DTYPES
from ..axes.grid import Configuration
from ..axes.libraries import LIBRARIES
from ..axes.methods import METHODS
from ..axes.models.problem import Problem
from ..axes.modes import ProblemCopies
from ..axes.scalings import ScalerSettings
from ..core.errors import InputError, RoundoffWarning
from ..core.registry import Registry
from ..core.text import printable
from ..judging.verdict import WELL_UNDER
from ..measuring.draws import draws_anew
from ..measuring.gradient_noise import NOISE_TIMESTEPS, batch_gradients, noise_from
from ..measuring.one_run import run_once
from ..measuring.outcomes import Status
from ..measuring.references import ReferenceCache
from ..measuring.rows import failure_columns, parameter_names, run_columns
from ..measuring.run_inputs import ResolvedRun
from ..measuring.run_spec import RunSpec
from ..measuring.torch_state import restored_torch_state
from ..measuring.yardsticks import yardstick_columns
from .watch_folder import append_watch_row, check_watch_folder, write_watch_manifest
from .watch_margin import LargestMagnitude

# Under this many times the format's largest finite value, the largest magnitude a step reached is too close to it:
# the weights double a few times more and the step overflows.
OVERFLOW_MARGIN = 8.0
# The batches of the iterations just before a measurement kept for its gradient noise.
NOISE_BATCHES = 8
# Why a watch warns: each a value of `raise_on`.
REASONS = ("roundoff", "overflow", "failure")
# The watch's own random numbers: the noise batches' float64 runs draw these.
WATCH_SEED = 0


class Watch:
    """What `watch(...)` returns: call it as `w(iteration, batch)` once per iteration of the training loop. `rows`:
    the rows measured in this process; `first_warning`: the iteration of the first warning, or None."""

    def __init__(
        self,
        model: nn.Module,
        step: Callable[..., torch.Tensor],
        every: int,
        dtype: str,
        out: str | Path,
        library: str,
        method: str,
        n_timesteps: int,
        scaler: Any,
        raise_on: Iterable[str],
        noise_batches: int,
    ) -> None:
        self.model, self.step, self.every, self.out = model, step, every, Path(out)
        self.scaler, self.raise_on, self.noise_batches = scaler, frozenset(raise_on), noise_batches
        self.setup: dict[str, str | int] = {
            "dtype": dtype,
            "library": library,
            "method": method,
            "n_timesteps": n_timesteps,
            "scaling": "grad" if scaler is not None else "none",
            "mode": "autocast",
        }
        config = Configuration(
            "watch",
            library,
            method,
            n_timesteps,
            dtype,
            str(self.setup["scaling"]),
            "autocast",
            loss_in=Problem.default_loss_in,
        )
        self.config, self.resolved = config, ResolvedRun.of(config, {})
        self.fingerprint = {
            "setup": self.setup,
            "parameters": [[name, list(p.shape)] for name, p in model.named_parameters()],
            "step": f"{getattr(step, '__module__', '?')}.{getattr(step, '__qualname__', type(step).__name__)}",
        }
        self.first: int | None = None
        self.last: int | None = None
        self.kept: deque[Any] = deque(maxlen=noise_batches)
        self.rows: list[dict[str, Any]] = []
        self.first_warning: int | None = None
        # What the draws replay found of the step (draws.py): kept where it draws nothing, so that the next
        # measurement's runs are not replayed op by op to find it again.
        self.draws: Any = None

    def __call__(self, iteration: int, batch: Any) -> dict[str, Any] | None:
        """Measure at the first call and every `every` iterations from it (the row, else None); keep the batches of
        the iterations just before a measurement for its gradient noise."""
        if isinstance(iteration, bool) or not isinstance(iteration, int) or iteration < 0:
            raise InputError(f"watch: iteration must be a whole number ≥ 0, got {printable(repr(iteration))}")
        if self.last is not None and iteration <= self.last:
            raise InputError(f"watch: iteration {iteration} after {self.last}: give each call a larger iteration")
        if self.first is None:
            self._open()
            self.first = iteration
        self.last = iteration
        since = (iteration - self.first) % self.every
        row = None
        if since == 0:
            row = self.measure(iteration, batch)
        if self.every - since <= self.noise_batches or since == 0:
            self.kept.append(_kept_copy(batch))
        return row

    def _open(self) -> None:
        resumed = check_watch_folder(self.out, self.fingerprint)
        if not resumed:
            write_watch_manifest(self.out, {"fingerprint": self.fingerprint, "every": self.every})

    def measure(self, iteration: int, batch: Any) -> dict[str, Any]:
        """One row on the current weights and `batch`, appended to the folder; warns (or raises) as it says."""
        started = time.perf_counter()
        with _apart():
            row = self._row(iteration, batch)
        row["seconds"] = time.perf_counter() - started
        reasons = _reasons(row)
        row["warning"] = "; ".join(message for _, message in reasons) or None
        append_watch_row(self.out, row)
        self.rows.append(row)
        if reasons:
            if self.first_warning is None:
                self.first_warning = iteration
            message = f"roundoff watch at iteration {iteration}: {row['warning']}"
            if any(reason in self.raise_on for reason, _ in reasons):
                raise RoundoffWarning(message)
            warnings.warn(message, RoundoffWarning, stacklevel=3)
        return row

    def _row(self, iteration: int, batch: Any) -> dict[str, Any]:
        resolved, dtype = self.resolved, self.resolved.dtype
        scale = float(self.scaler.get_scale()) if self.scaler is not None else None
        settings = ScalerSettings(init_scale=scale) if scale else ScalerSettings()
        earlier = list(self.kept)
        problem = Problem(
            model=copy.deepcopy(self.model),
            step=self.step,
            sample_batch=lambda k: (batch, *earlier)[k],
        )
        copies = ProblemCopies(problem, batch)
        prepared = resolved.arithmetic.prepare(resolved.mode, copies, dtype, ArithmeticRequest())
        assert dtype.torch_dtype is not None  # watch() refuses a format torch does not compute in
        if self.draws is not None:  # the step drew nothing in the last measurement: its runs need no replay
            copies.draws = self.draws
        largest = LargestMagnitude(dtype.torch_dtype)
        with largest:
            # Draw 0 of the step's random numbers, as its reference gets them (draws.py).
            spec = RunSpec(
                prepared,
                copies,
                resolved.library,
                resolved.method,
                self.config.n_timesteps,
                loss_in=resolved.loss_in,
                draw=0,
            )
            run = run_once(spec, resolved.scaling, settings)
        largest_magnitude = largest.value(run.report.max_abs_adjoint)
        row: dict[str, Any] = {
            "iteration": iteration,
            **{k: v for k, v in self.setup.items() if k != "mode"},
            "status": str(Status.OK.value),
            "unit_roundoff": dtype.unit_roundoff,
            "dtype_max": dtype.max,
            "loss_scale": scale,
            "loss": _number(run.loss),
        }
        try:
            reference = ReferenceCache(copies, settings).get(resolved.library, resolved.method, self.config.n_timesteps)
        except Exception as exc:  # noqa: BLE001 - no reference: the row says why, the training goes on
            if run.failure is not None:  # weights the training left non-finite: the low run's failure is the news
                return {**row, **failure_columns(run.failure), "status": str(Status.FAILED.value)}
            return {
                **row,
                "status": str(Status.SKIPPED.value),
                "failure_message": f"the float64 reference failed: {exc}",
            }
        self.draws = None if draws_anew(copies) else copies.draws
        measured = run_columns(self.config, dtype, [run], [reference], parameter_names(copies))
        row.update(measured, status=str(getattr(measured.get("status"), "value", row["status"])))
        row["reference_loss"] = _number(reference.loss)
        with _own_draws():
            gradients, stopped = batch_gradients(copies, NOISE_TIMESTEPS, range(1, len(earlier) + 1), prepared.device)
        noise = noise_from(gradients, stopped, max(len(earlier), 2), NOISE_TIMESTEPS, 0.0)
        errors = {name: row.get(name) for name in ("grad_params_rel_err",)}
        row.update(yardstick_columns(None, reference, None, noise, self.config.n_timesteps, errors))
        row["largest_magnitude"] = largest_magnitude
        row["overflow_margin"] = dtype.max / row["largest_magnitude"] if row["largest_magnitude"] else math.inf
        return row


def watch(
    model: nn.Module,
    step: Callable[..., torch.Tensor],
    every: int = 100,
    dtype: str = "float16",
    out: str | Path = "roundoff-watch",
    *,
    library: str = "torchdiffeq",
    method: str = "rk4",
    n_timesteps: int = 16,
    scaler: Any = None,
    raise_on: str | Iterable[str] = (),
    noise_batches: int = NOISE_BATCHES,
) -> Watch:
    """A watch of `model`'s training in `dtype`, measured every `every` iterations, its rows in `out/watch.parquet`.

    Args:
        model: The `nn.Module` being trained (measured on a copy; never changed).
        step: `step(model, batch, odeint) -> loss`, the step a `ra.Problem` takes: the handed `odeint` solves with
            `library` and `method` in `n_timesteps` equal steps.
        every: Measure at the first call and every `every` iterations after it.
        dtype: The training's low precision (`roundoff list` names them).
        out: The folder of the watch's table; a resumed run of the same watch appends to it.
        scaler: A GradScaler (anything with `get_scale()`): each measurement's loss scale is its current scale.
        raise_on: Reasons that raise the `RoundoffWarning` instead of warning: "roundoff", "overflow", "failure" or
            "any".
        noise_batches: Batches of the iterations just before a measurement kept for its gradient noise.
    """
    if not isinstance(model, nn.Module):
        raise InputError(f"watch: model must be a torch.nn.Module, got a {type(model).__name__}")
    if not callable(step):
        raise InputError(f"watch: step must be callable as step(model, batch, odeint), got a {type(step).__name__}")
    counts: tuple[tuple[str, object, int], ...] = (
        ("every", every, 1),
        ("n_timesteps", n_timesteps, 1),
        ("noise_batches", noise_batches, 2),
    )
    for name, count, least in counts:
        if isinstance(count, bool) or not isinstance(count, int) or count < least:
            raise InputError(f"watch: {name} must be a whole number ≥ {least}, got {printable(repr(count))}")
    axes: tuple[tuple[str, Registry[Any], str], ...] = (
        ("dtype", DTYPES, dtype),
        ("library", LIBRARIES, library),
        ("method", METHODS, method),
    )
    for axis, registry, value in axes:
        if value not in registry:
            allowed = ", ".join(registry.allowed())
            raise InputError(f"watch: unknown {axis} {printable(repr(value))}; one of {allowed}")
    if DTYPES.get(dtype).torch_dtype is None:
        raise InputError(f"watch: dtype {dtype} has no torch dtype; the watch measures the formats torch computes in")
    if scaler is not None and not callable(getattr(scaler, "get_scale", None)):
        raise InputError(
            f"watch: scaler must have get_scale(), as torch.amp.GradScaler has; got a {type(scaler).__name__}"
        )
    if not isinstance(out, str | Path) or not str(out):
        raise InputError(f"watch: out must be a folder path, got {printable(repr(out))}")
    reasons = _raise_on(raise_on)
    return Watch(model, step, every, dtype, out, library, method, n_timesteps, scaler, reasons, noise_batches)


def _raise_on(raise_on: str | Iterable[str]) -> frozenset[str]:
    given = [raise_on] if isinstance(raise_on, str) else list(raise_on) if isinstance(raise_on, Iterable) else None
    if given is None or any(not isinstance(r, str) or r not in (*REASONS, "any") for r in given):
        raise InputError(f"watch: raise_on takes {', '.join(REASONS)} or any, got {printable(repr(raise_on))}")
    return frozenset(REASONS) if "any" in given else frozenset(given)


def _reasons(row: dict[str, Any]) -> list[tuple[str, str]]:
    """Why the row warns: (reason, what it says), in REASONS' order."""
    found: list[tuple[str, str]] = []
    dtype, ratio, margin = row["dtype"], row.get("roundoff_to_noise"), row.get("overflow_margin")
    if ratio is not None and math.isfinite(ratio) and ratio > WELL_UNDER:
        found.append(
            (
                "roundoff",
                f"{dtype}'s parameter-gradient roundoff is {ratio:.3g}× the gradient noise, above the {WELL_UNDER:g}× "
                "the verdict calls safe for training",
            )
        )
    if row["status"] == Status.OK.value and margin == 0.0:
        found.append(("overflow", f"a {dtype} value overflowed to inf, though the step's results stayed finite"))
    elif row["status"] == Status.OK.value and margin is not None and margin < OVERFLOW_MARGIN:
        found.append(
            (
                "overflow",
                f"the largest magnitude, {row['largest_magnitude']:.3g}, is within {margin:.3g}× of {dtype}'s largest "
                f"finite {row['dtype_max']:.5g} (warned under {OVERFLOW_MARGIN:g}×)",
            )
        )
    if row["status"] == Status.FAILED.value:
        found.append(("failure", f"the {dtype} step failed ({row.get('failure_class')}: {row.get('failure_message')})"))
    return found


def _number(value: torch.Tensor | None) -> float | None:
    return None if value is None else float(value)


def _kept_copy(batch: Any) -> Any:
    """The batch as it is now (the loop may fill its tensors again in place)."""
    return pytree.tree_map(lambda leaf: leaf.detach().clone() if isinstance(leaf, torch.Tensor) else leaf, batch)


@contextmanager
def _apart() -> Iterator[None]:
    """The user's random generators, autocast state and grad mode as they were, whatever the measurement did."""
    python_state, numpy_state = random.getstate(), np.random.get_state()
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
    with torch.random.fork_rng(devices=devices), restored_torch_state(), torch.enable_grad():
        try:
            yield
        finally:
            random.setstate(python_state)
            np.random.set_state(numpy_state)


@contextmanager
def _own_draws() -> Iterator[None]:
    """The noise batches' runs draw numbers of the watch's own, the same at every measurement."""
    torch.manual_seed(WATCH_SEED)
    random.seed(WATCH_SEED)
    np.random.seed(WATCH_SEED)
    yield
