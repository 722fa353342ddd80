"""A run's outcome as plain containers (tensors, lists, numbers), so that a process of the sweep can save it in the
results folder and another read it back with `torch.load(weights_only=True)`: how a float64 reference solved as a
yardstick's piece reaches the configurations it is the reference of (yardsticks.py)."""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import Any

from ..solvers import SolveReport, StepRecord
from .one_run import RunOutcome
from .solve_calls import SolveRecord

# What a failed run holds beside these is not recorded: only a reference that succeeded is shared.
_PLAIN = (
    "trajectory",
    "loss",
    "grads",
    "n_inputs",
    "final_scale",
    "retries",
    "backward_passes",
    "forward_s",
    "backward_s",
    "peak_memory_bytes",
)


def outcome_record(outcome: RunOutcome) -> dict[str, Any]:
    assert outcome.failure is None, "a failed run is nobody's reference"
    report = outcome.report
    return {
        **{name: getattr(outcome, name) for name in _PLAIN},
        "report": {
            **{f.name: getattr(report, f.name) for f in fields(report) if f.name != "backward"},
            "backward": [asdict(record) for record in report.backward],
        },
        "solves": [asdict(solve) for solve in outcome.solves],
    }


def outcome_from_record(record: dict[str, Any]) -> RunOutcome:
    report = {**record["report"], "backward": [StepRecord(**step) for step in record["report"]["backward"]]}
    return RunOutcome(
        **{name: record[name] for name in _PLAIN},
        report=SolveReport(**report),
        solves=[SolveRecord(**solve) for solve in record["solves"]],
    )
