"""A step that trains a tensor outside its model (a global `nn.Parameter`, a module kept in a plain list, a tensor its
closure holds, the factory's own model in place of the one handed to the step) is refused before anything runs, in one
line naming the tensor, its shape and where it was found: the sweep measures the model's parameters only, so that
tensor's gradient would go unmeasured. Tensors the step makes for itself are not refused."""

from __future__ import annotations

from pathlib import Path

import pytest

import roundoff_analyzer as ra

from .conftest import run_cli

FIXTURE = Path(__file__).parent / "fixtures" / "outside_model.py"


@pytest.mark.parametrize(
    "factory, said",
    [
        ("global_parameter", "trains `SCALE`, a global of outside_model.py (a float32 parameter of shape 4)"),
        (
            "listed_module",
            "uses `model.helpers[0].weight`, an attribute of the model that is not a submodule (a float32 parameter "
            "of shape 4×4), and 1 more such tensor, not among the model's parameters",
        ),
        ("closed_over", "trains `shift`, closed over by the step (a float32 tensor of shape 4)"),
    ],
)
def test_a_step_training_a_tensor_outside_its_model_is_refused_in_one_line_naming_it(tmp_path, factory, said):
    out = tmp_path / "out"
    result = run_cli("sweep", "--model", f"{FIXTURE}:{factory}", "--timesteps", "4", "--out", out)
    assert result.exit_code == 2
    message = result.output.strip()
    assert len(message.splitlines()) == 1, message
    assert said in message and "register it in the model" in message, message
    assert not out.exists()


def test_a_step_computing_with_its_factorys_model_rather_than_the_one_handed_is_told_to_use_its_argument(tmp_path):
    out = tmp_path / "out"
    result = run_cli("sweep", "--model", f"{FIXTURE}:factory_model", "--timesteps", "4", "--out", out)
    assert result.exit_code == 2
    message = result.output.strip()
    assert len(message.splitlines()) == 1, message
    assert "computes with `model.weight` of the model its factory built" in message, message
    assert "compute with the step's `model` argument" in message and not out.exists()


def test_trainable_tensors_the_step_and_its_field_make_for_themselves_are_not_refused(tmp_path):
    result = ra.sweep(
        model=f"{FIXTURE}:own_leaves",
        out=tmp_path / "out",
        timesteps=[4],
        method="rk4",
        library=["native", "torchdiffeq", "torchdiffeq-adjoint"],
        dtype="float16",
        scaling="none",
        noise_batches=0,
        executor="local",
        progress=False,
        report=False,
    )
    table = result.results
    assert (table["status"] == "ok").all(), table[["library", "failure_message"]]
    assert set(result.param_errors["parameter"]) == {"layer.weight", "layer.bias"}  # the batch is not differentiated
