"""The tape a solve keeps for backward, estimated from its first steps: equal to the whole tape counted
independently, changing nothing the solve computes, and stopping a solve that cannot fit before it fills the device."""

from __future__ import annotations

import subprocess
import sys
import weakref
from contextlib import nullcontext

import pytest
import torch
import torchdiffeq

from roundoff_analyzer.measuring.failures import classify_exception
from roundoff_analyzer.measuring.outcomes import FailureClass
from roundoff_analyzer.measuring.tape_estimate import TapeBudget, TapeTooLarge, TapeWatch

STATE, HIDDEN, BATCH = 16, 64, 32


class Field(torch.nn.Module):
    def __init__(self, width: int = HIDDEN, state: int = STATE) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(state, width), torch.nn.Tanh(), torch.nn.Linear(width, state))

    def forward(self, t, y):
        return self.net(y)


def solve_and_backward(func, field: Field, y0, t, method: str, dtype: torch.dtype | None):
    with (
        torch.autocast("cpu", dtype=dtype) if dtype else torch.autocast("cpu", enabled=False),
        func.watching() if isinstance(func, TapeWatch) else nullcontext(),
    ):
        trajectory = torchdiffeq.odeint(func, y0, t, method=method)
    trajectory.float().square().mean().backward()
    grads = [p.grad.clone() for p in field.parameters()]
    field.zero_grad(set_to_none=True)
    return trajectory.detach(), grads


def whole_tape_bytes(func, y0, t, method: str, dtype: torch.dtype | None) -> int:
    """Every storage the tape holds once the solve is done, each once: the independent count. A saved tensor whose
    node the solve dropped (torchdiffeq's `y.abs()` under autocast) is freed and not counted; storages still held
    have distinct addresses."""
    saved: list[tuple[weakref.ref, int, int]] = []

    def pack(tensor):
        storage = tensor.untyped_storage()
        saved.append((weakref.ref(tensor), storage.data_ptr(), storage.nbytes()))
        return tensor

    with (
        torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor),
        torch.autocast("cpu", dtype=dtype) if dtype else torch.autocast("cpu", enabled=False),
    ):
        trajectory = torchdiffeq.odeint(func, y0, t, method=method)
    parameters = {p.untyped_storage().data_ptr() for p in func.parameters()}
    held = {pointer: size for tensor, pointer, size in saved if tensor() is not None and pointer not in parameters}
    del trajectory
    return sum(held.values())


@pytest.mark.parametrize(
    ("method", "stages", "dtype"),
    [("rk4", 4, None), ("euler", 1, None), ("rk4", 4, torch.bfloat16), ("rk4", 4, torch.float16)],
)
def test_the_estimate_is_the_whole_tape_and_the_watch_changes_nothing(method, stages, dtype):
    torch.manual_seed(0)
    field, y0, n_steps = Field(), torch.randn(BATCH, STATE), 40
    t = torch.linspace(0, 1, n_steps + 1)
    watch = TapeWatch(field, TapeBudget(torch.device("cpu"), 10**12, n_steps, stages))
    watched = solve_and_backward(watch, field, y0, t, method, dtype)
    plain = solve_and_backward(field, field, y0, t, method, dtype)
    assert torch.equal(watched[0], plain[0]) and all(torch.equal(a, b) for a, b in zip(watched[1], plain[1]))
    assert watch.calls == n_steps * stages  # every evaluation went through, the watched ones included
    whole = whole_tape_bytes(field, y0, t, method, dtype)
    # Within the tolerance, and the weights, which the estimate counts once and the independent count leaves out.
    weights = sum(p.numel() * p.element_size() for p in field.parameters())
    assert abs(watch.estimate - whole) <= 0.02 * whole + weights


@pytest.mark.unit
def test_a_solve_that_cannot_fit_stops_after_its_first_step_with_the_estimate_and_the_limit():
    field, y0, n_steps = Field(), torch.randn(BATCH, STATE), 100_000
    budget = TapeBudget(torch.device("cpu"), 50_000_000, n_steps, 4)
    watch = TapeWatch(field, budget)
    with pytest.raises(TapeTooLarge) as stopped, watch.watching():
        torchdiffeq.odeint(watch, y0, torch.linspace(0, 1, n_steps + 1), method="rk4")
    assert watch.calls == 4  # one step of four stages, not 400,000 evaluations
    failure = classify_exception(stopped.value)
    assert failure.failure_class == FailureClass.OOM and failure.failure_type == "TapeTooLarge"
    estimate_gb = watch.estimate / 1e9
    assert f"{estimate_gb:.3g} GB" in failure.message and "0.05 GB available" in failure.message
    assert "measured on its first 1 of 100000 steps" in failure.message and "stopped after step 1" in failure.message


def test_a_solve_without_a_tape_is_never_stopped():
    """Under no_grad (the native solver's forward, the adjoint's) nothing is saved: a budget of one byte passes."""
    field, y0 = Field(), torch.randn(BATCH, STATE)
    watch = TapeWatch(field, TapeBudget(torch.device("cpu"), 1, 1000, 4))
    with torch.no_grad(), watch.watching():
        torchdiffeq.odeint(watch, y0, torch.linspace(0, 1, 1001), method="rk4")
    assert watch.calls == 4000 and watch.estimate == 0


def test_on_the_cpu_the_budget_is_what_the_address_space_limit_leaves():
    """A job under `ulimit -v` (a batch system's memory limit) has less than the machine's memory."""
    script = (
        "import resource, torch\n"
        "from roundoff_analyzer.measuring.tape_estimate import TapeBudget\n"
        "free = TapeBudget.for_run(torch.device('cpu'), 10, 4).available\n"
        "limit = 6_000_000_000\n"
        "resource.setrlimit(resource.RLIMIT_AS, (limit, limit))\n"
        "limited = TapeBudget.for_run(torch.device('cpu'), 10, 4).available\n"
        "print(free, limited, limit)\n"
    )
    free, limited, limit = map(
        int, subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.split()
    )
    assert 0 < limited < limit <= free or 0 < limited < free < limit


@pytest.mark.cuda
def test_on_a_gpu_a_tape_beyond_the_card_is_stopped_before_it_is_allocated():
    device = torch.device("cuda")
    field, y0, n_steps = Field(width=4096, state=64).to(device), torch.randn(8192, 64, device=device), 10_000
    budget = TapeBudget.for_run(device, n_steps, 4)
    assert budget is not None and budget.available > 0
    torch.cuda.reset_peak_memory_stats(device)
    watch = TapeWatch(field, budget)
    # Output at the ends only: the solution at 10,001 times would itself take 21 GB.
    ends, options = torch.tensor([0.0, 1.0], device=device), {"step_size": 1 / n_steps}
    with pytest.raises(TapeTooLarge, match=r"cuda(:0)? has .* GB available"), watch.watching():
        torchdiffeq.odeint(watch, y0, ends, method="rk4", options=options)
    assert watch.calls == 4 and torch.cuda.max_memory_allocated(device) < 0.05 * budget.available


REFERENCE_SCRIPT = """
import resource, sys
import torch
from roundoff_analyzer.axes.libraries import LIBRARIES
from roundoff_analyzer.axes.methods import METHODS
from roundoff_analyzer.axes.modes import ProblemCopies
from roundoff_analyzer.axes.scaler_settings import ScalerSettings
from roundoff_analyzer.execution import engine
from roundoff_analyzer.measuring.references import ReferenceCache
from roundoff_analyzer.planning import config

def float64_reference(limit_above_now):
    torch.set_num_threads(1)
    request = {"model": "otflow", "options": {"d": "3", "hidden": "128", "batch": "256"}, "timesteps": [32],
               "device": "cpu"}
    copies = ProblemCopies(engine.plan(config.validate(request)).problem)
    if limit_above_now:
        status = open("/proc/self/status").read().splitlines()
        mapped = 1024 * int(next(line for line in status if line.startswith("VmSize:")).split()[1])
        resource.setrlimit(resource.RLIMIT_AS, (mapped + limit_above_now, mapped + limit_above_now))
    cache = ReferenceCache(copies, ScalerSettings())
    outcome = cache.get(LIBRARIES.get("torchdiffeq"), METHODS.get("rk4"), 32)
    return cache.n_recomputed, [outcome.trajectory, outcome.loss, *outcome.grads]

if __name__ == "__main__":
    recomputed, tensors = float64_reference(int(sys.argv[1]))
    torch.save({"recomputed": recomputed, "tensors": tensors}, sys.argv[2])
"""


@pytest.mark.slow  # two fresh processes and three float64 solves: about 10 s
def test_a_reference_whose_tape_cannot_fit_is_solved_again_with_its_field_recomputed_to_the_same_bits(tmp_path):
    """torchdiffeq's float64 reference of a small OT-Flow keeps about 0.85 GB of tape; under an address-space limit of
    0.4 GB above what the process maps, it stops after one step and is solved again with the field's activations
    computed in the backward: the trajectory, the loss and every gradient equal the reference solved without a limit,
    bit for bit."""
    script = tmp_path / "reference.py"
    script.write_text(REFERENCE_SCRIPT)
    runs = {}
    for name, limit in (("free", 0), ("limited", 400_000_000)):
        subprocess.run([sys.executable, str(script), str(limit), str(tmp_path / name)], check=True, timeout=300)
        runs[name] = torch.load(tmp_path / name)
    assert runs["free"]["recomputed"] == 0 and runs["limited"]["recomputed"] == 1
    free, limited = runs["free"]["tensors"], runs["limited"]["tensors"]
    assert len(free) == len(limited) > 2 and all(torch.equal(a, b) for a, b in zip(free, limited))
