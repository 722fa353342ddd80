"""One setup's training: the optimizer on the setup's stored weights (float32 master weights, or weights in a low format
that each step is rounded into), a fresh batch per iteration, checkpoints and resume states.

A step whose gradient is not finite (after the scaling's own retries) is skipped: no update, the optimizer's state
untouched, as GradScaler skips it; the log counts it. A finite gradient is clipped (where asked) before the step.
The resume state is saved at every checkpoint and every `resume_every` iterations, with the optimizer's state, the
compensation buffers and the stochastic-rounding stream, so a run killed at any moment and started again with the
same command continues from the last one and ends with the weights of an uninterrupted run, bit for bit.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

import torch

from ..axes.modes import ProblemCopies
from ..core.devices import measured, synchronize
from ..measuring.cpu_memory import cpu_peak_memory
from ..measuring.gradient_noise import problem_batch_size
from . import log
from .clipping import clip_gradients
from .files import load_resume, save_checkpoint, save_resume
from .held_out import validation_loss
from .request_checks import TrainPlan, option_strings
from .setups import TrainSetup
from .step import LossScale, SetupStep, StepResult
from .stored_weights import StoredWeights


class TrainProgress(Protocol):
    def start(self, setup: str, total: int, done: int) -> None: ...
    def step(self, iteration: int, loss: float | None) -> None: ...
    def note(self, text: str) -> None: ...


class NoProgress:
    def start(self, setup, total, done): ...
    def step(self, iteration, loss): ...
    def note(self, text): ...


class TrainingInterrupted(Exception):
    """Asked to stop between iterations; the resume state of the iteration reached is on disk."""

    def __init__(self, folder: Path, setup: str, iteration: int, total: int) -> None:
        super().__init__(f"stopped setup {setup} at iteration {iteration} of {total}; its state is saved in {folder}")
        self.folder, self.setup, self.iteration, self.total = folder, setup, iteration, total


@dataclass
class SetupRun:
    """What a setup's training left: its log rows, its peak memory (None until it finished) and the bytes of its
    weights and of its optimizer's state (with the compensation buffers)."""

    rows: list[dict] = field(default_factory=list)
    peak_memory_bytes: int | None = None
    weight_bytes: int | None = None
    optimizer_state_bytes: int | None = None

    @classmethod
    def from_state(cls, state: dict) -> SetupRun:
        return cls(
            log.from_columns(state["log"]),
            state["peak_memory_bytes"],
            state.get("weight_bytes"),
            state.get("optimizer_state_bytes"),
        )


def _state(iteration, func, optimizer, loss_scale: LossScale, stored: StoredWeights, run: SetupRun) -> dict:
    return {
        "iteration": iteration,
        "func": func.state_dict(),
        "optimizer": optimizer.state_dict(),
        "loss_scale": {"scale": loss_scale.scale, "good_steps": loss_scale.good_steps},
        "stored_weights": stored.state_dict(),
        "log": log.as_columns(run.rows),
        "peak_memory_bytes": run.peak_memory_bytes,
        "weight_bytes": run.weight_bytes,
        "optimizer_state_bytes": run.optimizer_state_bytes,
    }


@dataclass
class Restored:
    """A setup ready to step: the trainable parameters of the problem's function, its stored weights, its optimizer
    and its step."""

    params: list[torch.nn.Parameter]
    stored: StoredWeights
    optimizer: torch.optim.Optimizer
    step: SetupStep


def restore(plan: TrainPlan, setup: TrainSetup, initial: dict, state: dict | None) -> Restored:
    """`setup` on the plan's problem, from the `initial` weights or, where given, its resume `state`."""
    func = plan.problem.model
    func.load_state_dict(initial)
    params = [p for p in func.parameters() if p.requires_grad]
    stored = StoredWeights(
        params, setup.weights, setup.update, setup.optimizer_state, plan.options.seed
    )  # rounds the initial weights
    optimizer = plan.optimizer.build(params, plan.config.lr)
    step = SetupStep(setup, plan.problem, plan.config.scaler)
    if state is not None:
        func.load_state_dict(state["func"])
        optimizer.load_state_dict(state["optimizer"])
        step.loss_scale = LossScale(**state["loss_scale"])
        stored.load_state_dict(state.get("stored_weights") or {})
    return Restored(params, stored, optimizer, step)


@dataclass
class Iteration:
    """One iteration's step and update: what the log records of it."""

    result: StepResult
    grad_norm: float | None
    clipped: bool
    lost_update_fraction: float | None
    seconds: float  # the step alone: forward, backward, the optimizer's update and its rounding into the weights


def iterate(restored: Restored, batch: torch.Tensor, clip_grad_norm: float | None, device: torch.device) -> Iteration:
    """One iteration on `batch`: the step, and where its gradient is finite the clipping and the update."""
    began = time.perf_counter()
    result = restored.step(batch)
    grad_norm, clipped, lost = None, False, None
    if result.gradients is not None:
        for p, g in zip(restored.params, result.gradients):
            p.grad = g
        grad_norm, clipped = clip_gradients(restored.params, clip_grad_norm)
        before = restored.stored.before_step()
        restored.optimizer.step()
        lost = restored.stored.after_step(before, restored.optimizer)
        restored.optimizer.zero_grad(set_to_none=True)
    synchronize(device)
    return Iteration(result, grad_norm, clipped, lost, time.perf_counter() - began)


def train_setup(
    plan: TrainPlan,
    setup: TrainSetup,
    folder: Path,
    initial: dict,
    validation: list[torch.Tensor],
    progress: TrainProgress,
    stop_requested: Callable[[], bool],
    saved: Callable[[SetupRun], None],
) -> SetupRun:
    """Train `setup` from `initial` weights (or its resume state in `folder`) to `plan.config.iters`; `saved` is called
    after each resume state is written (the caller rewrites the combined log)."""
    config, problem = plan.config, plan.problem
    func = problem.model
    state = load_resume(folder)
    restored = restore(plan, setup, initial, state)
    stored, optimizer, step = restored.stored, restored.optimizer, restored.step
    run, start = (SetupRun.from_state(state), state["iteration"]) if state is not None else (SetupRun(), 0)
    label, iters = setup.setup_label, config.iters
    if start >= iters:
        progress.note(f"{label}: already trained to iteration {start} in {folder}")
        return run
    metadata = {
        "model": plan.model.name,
        "options": option_strings(plan.options),
        "seed": plan.options.seed,
        "data": config.data,
        # The batch it trained at: a sweep of this checkpoint measures the gradient noise at it.
        "batch_size": problem_batch_size(ProblemCopies(plan.problem)),
        "setup": label,
        **setup.as_dict(),
    }

    def checkpoint(iteration: int, train_loss: float | None) -> float:
        val = validation_loss(problem, validation, setup.n_timesteps)
        save_checkpoint(
            folder,
            iteration,
            func,
            {"iteration": iteration, "loss": val, "val_loss": val, "train_loss": train_loss, **metadata},
        )
        return val

    def save(iteration: int) -> None:
        save_resume(folder, _state(iteration, func, optimizer, step.loss_scale, stored, run))
        saved(run)

    if start == 0 and not run.rows:  # the initial weights' validation loss, saved or not
        initial_val = (
            checkpoint(0, None) if 0 in plan.save_at else validation_loss(problem, validation, setup.n_timesteps)
        )
        run.rows.append(log.row(label, 0, val_loss=initial_val, weights=setup.weights, update=setup.update))
        save(0)
    progress.start(label, iters, start)
    elapsed = run.rows[-1]["time_s"] if run.rows else 0.0
    for iteration in range(start + 1, iters + 1):
        batch = plan.stream.train_batch(iteration)
        done = iterate(restored, batch, config.clip_grad_norm, plan.device)
        result = done.result
        elapsed += done.seconds
        last = iteration == iters
        val = checkpoint(iteration, result.loss) if iteration in plan.save_at else None
        if val is None and (last or (config.val_every and iteration % config.val_every == 0)):
            val = validation_loss(problem, validation, setup.n_timesteps)
        run.rows.append(
            log.row(
                label,
                iteration,
                result.loss,
                val,
                result.gradients is None,
                result.failure,
                result.scale,
                done.seconds,
                elapsed,
                weights=setup.weights,
                update=setup.update,
                lost_update_fraction=done.lost_update_fraction,
                grad_norm=done.grad_norm,
                clipped=done.clipped,
            )
        )
        if last:
            run.peak_memory_bytes = _peak_memory(step, batch, plan.device)
            run.weight_bytes, run.optimizer_state_bytes = stored.weight_bytes(), stored.optimizer_state_bytes(optimizer)
        if last or iteration in plan.save_at or iteration % config.resume_every == 0:
            save(iteration)
        progress.step(iteration, result.loss)
        if not last and stop_requested():
            if iteration % config.resume_every and iteration not in plan.save_at:
                save(iteration)
            raise TrainingInterrupted(folder, label, iteration, iters)
    return run


def _peak_memory(step: SetupStep, batch: torch.Tensor, device: torch.device) -> int | None:
    """The peak of one more step's forward and backward (not applied), measured apart: the
    CPU's profiler slows every op."""
    loss_scale = replace(
        step.loss_scale
    )  # the extra step must not move the loss scale a longer training would resume with
    try:
        return _measure_peak(step, batch, device)
    finally:
        step.loss_scale = loss_scale


def _measure_peak(step: SetupStep, batch: torch.Tensor, device: torch.device) -> int | None:
    if device.type == "cuda":
        with measured(device) as result:
            step(batch)
        return result.peak_memory_bytes
    with cpu_peak_memory() as peak:
        step(batch)
    return peak.bytes
