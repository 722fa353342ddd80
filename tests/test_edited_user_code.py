"""A user's code edited between two sweeps of one process (a notebook): the second sweep runs the code as it is then,
and its manifest's sha256 is that code's. Each second sweep is checked against a sweep of the same code that this
process has never loaded before (a copy under another name), and the sha256 against the file's bytes."""

from __future__ import annotations

import hashlib
import importlib
import sys
import textwrap
from pathlib import Path

import pytest

import roundoff_analyzer as ra
from roundoff_analyzer.core.errors import InputError

ERRORS = ["final_rel_err", "grad_y0_rel_err", "grad_params_rel_err"]

# Forward Euler whose states are kept in float32, or, after the edit, rounded to bfloat16 after each step.
LIBRARY = textwrap.dedent("""
    import torch

    ROUNDED_TO = None


    class Euler:
        name = "edited-euler"
        description = "forward Euler, autograd through every step"
        supports_adjoint_scaling = False

        def unsupported_method_reason(self, method):
            return None if method.name == "euler" else "euler only"

        def solve(self, func, y0, t, method, scaler, report):
            states = [y0]
            for k in range(t.numel() - 1):
                y = states[-1] + (t[k + 1] - t[k]) * func(t[k], states[-1]).to(y0.dtype)
                low = ROUNDED_TO is not None and y0.dtype != torch.float64
                states.append(y.to(ROUNDED_TO).to(y0.dtype) if low else y)
            return torch.stack(states)


    library = Euler()
""")
ROUNDING_LIBRARY = LIBRARY.replace("ROUNDED_TO = None", "ROUNDED_TO = torch.bfloat16")

# A field whose hidden layer is tanh, or, after the edit, a thousand times larger before it.
MODEL = textwrap.dedent("""
    import torch
    from torch import nn

    GAIN = 1.0


    class Field(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner, self.outer = nn.Linear(4, 16), nn.Linear(16, 4)

        def forward(self, t, y):
            return self.outer(torch.tanh(GAIN * self.inner(y)))


    def field():
        y0 = torch.randn(8, 4, generator=torch.Generator().manual_seed(0))
        return Field(), y0, lambda trajectory: trajectory[-1].square().mean()
""")
AMPLIFIED_MODEL = MODEL.replace("GAIN = 1.0", "GAIN = 1000.0")


def sweep(out: Path, **grid) -> ra.SweepResult:
    settings = {"timesteps": [4], "method": "euler", "dtype": "float16", "scaling": "none", "noise_batches": 0}
    return ra.sweep(**(settings | grid), out=out, progress=False, report=False)


def errors(result: ra.SweepResult) -> list[float]:
    row = result.results.iloc[0]
    assert row["status"] == "ok", row["failure_message"]
    return [float(row[column]) for column in ERRORS]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_library_file_edited_between_two_sweeps_is_swept_as_it_is_then(tmp_path):
    library_file = tmp_path / "edited_library.py"
    library_file.write_text(LIBRARY)
    spec = f"{library_file}:library"
    before = sweep(tmp_path / "before", model="linear", library=spec)
    library_file.write_text(ROUNDING_LIBRARY)
    after = sweep(tmp_path / "after", model="linear", library=spec)

    fresh_file = tmp_path / "never_loaded_library.py"
    fresh_file.write_text(ROUNDING_LIBRARY)
    fresh = sweep(tmp_path / "fresh", model="linear", library=f"{fresh_file}:library")
    assert errors(after) == errors(fresh)
    assert errors(after) != errors(before)  # the edit changes the numbers: the test can tell old code from new
    assert after.manifest["settings"]["user_code"] == {spec: sha256(library_file)}


IMPORTED_BY_THE_USER = "module the user imported and then edited"
IMPORTED_WITH_BYTECODE = "module the user imported, its bytecode cached, and then edited"


@pytest.mark.parametrize("form", ["file", "module", IMPORTED_BY_THE_USER, IMPORTED_WITH_BYTECODE])
def test_a_model_factory_edited_between_two_sweeps_is_swept_as_it_is_then(tmp_path, monkeypatch, form):
    monkeypatch.syspath_prepend(str(tmp_path))
    # A module name of its own per test: the import system's cache is the process's.
    name = f"edited_model_{form.split(',')[0].replace(' ', '_')}_{abs(hash(str(tmp_path)))}"
    model_file = tmp_path / f"{name}.py"
    model_file.write_text(MODEL)
    spec = f"{model_file}:field" if form == "file" else f"{name}:field"
    if form in (IMPORTED_BY_THE_USER, IMPORTED_WITH_BYTECODE):
        # Imported by the notebook before any sweep (writing __pycache__, as Python does by default), then edited.
        monkeypatch.setattr(sys, "dont_write_bytecode", form == IMPORTED_BY_THE_USER)
        importlib.import_module(name)
        monkeypatch.undo()
        monkeypatch.syspath_prepend(str(tmp_path))
        before = None
    else:
        before = sweep(tmp_path / "before", model=spec)
    model_file.write_text(AMPLIFIED_MODEL)
    after = sweep(tmp_path / "after", model=spec)

    fresh_file = tmp_path / f"never_loaded_{name}.py"
    fresh_file.write_text(AMPLIFIED_MODEL)
    fresh = sweep(tmp_path / "fresh", model=f"{fresh_file}:field")
    assert errors(after) == errors(fresh)
    if before is not None:
        assert errors(after) != errors(before)
    assert after.manifest["settings"]["user_code"] == {spec: sha256(model_file)}


def test_a_module_the_user_imported_and_left_as_it_was_is_not_imported_again(tmp_path, monkeypatch):
    # Run again, a module that registers a plug-in as it is imported would register it twice: only an edit does that.
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    name = f"unedited_model_{abs(hash(str(tmp_path)))}"
    (tmp_path / f"{name}.py").write_text(MODEL + "\nRUNS = globals().get('RUNS', 0) + 1\n")
    module = importlib.import_module(name)
    first = sweep(tmp_path / "first", model=f"{name}:field")
    second = sweep(tmp_path / "second", model=f"{name}:field")
    assert module.RUNS == 1
    assert errors(first) == errors(second)


def test_a_module_beside_the_model_file_edited_between_two_sweeps_is_imported_again(tmp_path, monkeypatch):
    # `from helper import GAIN` finds the helper beside the model file, as a script would; edited, it is read again.
    name = f"helper_{abs(hash(str(tmp_path)))}"
    (tmp_path / f"{name}.py").write_text("GAIN = 1.0\n")
    model_file = tmp_path / "model_with_helper.py"
    model_file.write_text(MODEL.replace("GAIN = 1.0", f"from {name} import GAIN"))
    spec = f"{model_file}:field"
    before = sweep(tmp_path / "before", model=spec)
    (tmp_path / f"{name}.py").write_text("GAIN = 1000.0\n")
    after = sweep(tmp_path / "after", model=spec)

    fresh_file = tmp_path / "never_loaded_model.py"
    fresh_file.write_text(AMPLIFIED_MODEL)
    assert errors(after) == errors(sweep(tmp_path / "fresh", model=f"{fresh_file}:field")) != errors(before)


def test_a_library_file_broken_by_an_edit_is_refused_in_one_line_at_the_next_sweep(tmp_path):
    library_file = tmp_path / "broken_library.py"
    library_file.write_text(LIBRARY)
    spec = f"{library_file}:library"
    sweep(tmp_path / "before", model="linear", library=spec)
    library_file.write_text(LIBRARY + "\nraise RuntimeError('half-written')\n")
    with pytest.raises(InputError) as refused:
        sweep(tmp_path / "after", model="linear", library=spec)
    message = str(refused.value)
    assert len(message.splitlines()) == 1 and "half-written" in message, message
    assert not (tmp_path / "after").exists()
