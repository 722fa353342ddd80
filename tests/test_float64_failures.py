"""A step that fails in float64 says where: the user's line whose operation met a float32 tensor, the line that made
that tensor, and the usual cause (`.float()`, `torch.tensor(...)` of Python floats, a tensor attribute the model's cast
leaves float32), in the one line the sweep refuses with before anything is written."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

import roundoff_analyzer as ra
from roundoff_analyzer.core.errors import InputError
from roundoff_analyzer.measuring.narrow_origins import NarrowOrigins

HERE = Path(__file__)


def _line(code: str) -> str:
    """`test_float64_failures.py:N `code`` for the one line of this file that holds `code`."""
    numbers = [n for n, line in enumerate(HERE.read_text().splitlines(), 1) if line.strip() == code]
    assert len(numbers) == 1, code
    return f"{HERE.name}:{numbers[0]} `{code}`"


class Field(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(2, 2)
        self.mixing = torch.tensor([[0.1, 0.2], [0.3, 0.4]])  # a plain attribute: the model's cast leaves it float32

    def forward(self, t, x):
        return self.net(x)


def _converted(model, y):
    y = y.float()
    return model.net(y)


def _made(model, y):
    w = torch.tensor([[0.5, 0.1], [0.2, 0.3]])
    return torch.mm(y, w.t() * 2)


def _kept(model, y):
    return y @ model.mixing


STEPS = {"converted": _converted, "made": _made, "kept": _kept}


def float32_in_float64(kind: str = "converted", draws: bool = False, seed: int = 0) -> ra.Problem:
    def step(model, batch, odeint):
        if draws:
            torch.randn(1)  # a step that draws: its float64 evaluation runs under the draw replay too
        y = odeint(model, batch, torch.tensor([0.0, 1.0]))[-1]
        return STEPS[kind](model, y).pow(2).mean()

    return ra.Problem(model=Field(), step=step, sample_batch=lambda k: torch.randn(8, 2))


@pytest.mark.parametrize("draws", [False, True])
@pytest.mark.parametrize(
    ("kind", "failing", "said"),
    [
        (
            "converted",
            "`linear` at {} met a float32 tensor (8×2) made at {}: `.float(...)` cast float64 values to float32",
            ("return model.net(y)", "y = y.float()"),
        ),
        (
            "made",
            "`mm` at {} met a float32 tensor (2×2) made at {}: `torch.tensor(...)` of Python floats or float32 data "
            "makes torch's default dtype, float32",
            ("return torch.mm(y, w.t() * 2)", "w = torch.tensor([[0.5, 0.1], [0.2, 0.3]])"),
        ),
        (
            "kept",
            "`matmul` at {} met a float32 tensor (2×2) made before the step (in the factory or a module's __init__: a "
            "tensor that is neither a parameter nor a buffer stays float32 when the model is cast)",
            ("return y @ model.mixing",),
        ),
    ],
)
def test_a_step_failing_in_float64_names_the_line_that_made_its_float32_tensor_and_why(
    tmp_path, kind, failing, said, draws
):
    out = tmp_path / "sweep"
    with pytest.raises(InputError) as refused:
        ra.sweep(
            model=float32_in_float64,
            options={"kind": kind, "draws": draws},
            out=out,
            progress=False,
            timesteps=[4],
            method="euler",
            library="native",
            dtype="float16",
            noise_batches=0,
            executor="local",
        )
    message = str(refused.value)
    assert "\n" not in message and not out.exists()
    assert "its step fails in float64" in message and "same dtype" in message
    assert failing.format(*map(_line, said)) in message
    assert "give it the dtype of the tensors it meets (`dtype=x.dtype`, `.to(x)`)" in message


@pytest.mark.unit
def test_a_float32_tensor_computed_from_another_keeps_the_place_the_first_was_made_and_float64_alone_says_nothing():
    x = torch.randn(3, 2, dtype=torch.float64)
    with NarrowOrigins() as watched, pytest.raises(RuntimeError):
        base = torch.zeros(2, 2)
        scaled = base[0:1].t() * 3  # computed from `base`: made where `base` was
        torch.mm(x, scaled.expand(2, 2))
    assert watched.failed is not None
    assert f"made at {_line('base = torch.zeros(2, 2)')}: `zeros` without `dtype=` makes torch's default" in (
        watched.failed
    )
    with NarrowOrigins() as clean:
        torch.mm(x, torch.ones(2, 2, dtype=torch.float64))
        with pytest.raises(RuntimeError):
            torch.mm(x, torch.ones(3, 3, dtype=torch.float64))  # fails on shapes, with no float32 input
    assert clean.failed is None
