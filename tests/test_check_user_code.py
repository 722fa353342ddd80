"""CI that sees the user's code: a sweep records every file its factory's import brought in (`settings.user_files`),
`roundoff check` names each one that changed, and compares the float64 references' norms, so that a reference that
moved (a head computed in float16 in every precision, float64's included) is said per configuration, never read as
errors that fell."""

from __future__ import annotations

import hashlib
import json
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from roundoff_analyzer.core.user_code import load_attribute
from roundoff_analyzer.core.user_files import user_files
from roundoff_analyzer.judging.check import compare
from roundoff_analyzer.judging.manifest_setup import file_changes
from roundoff_analyzer.judging.yardstick_check import NORM_RTOL
from roundoff_analyzer.measuring.columns import REFERENCE_NORM_COLUMNS

from .conftest import WIDE_TABLES, run_cli

# Two configurations (n = 4 and 8) of one library, dtype and scaling: seconds.
TINY = ["--timesteps", "4,8", "--method", "euler", "--dtype", "float16", "--scaling", "none", "--library", "native"]
TINY += ["--device", "cpu", "--noise-batches", "0", "--no-report"]

# The factory file: it imports its model from the file beside it (named per test: one process imports each name once).
FACTORY = """
import torch

from {module} import Field


def make(seed: int = 0):
    torch.manual_seed(seed)
    y0 = torch.randn(8, 3, generator=torch.Generator().manual_seed(1))
    return Field(), y0, lambda trajectory: (trajectory[-1] ** 2).mean()
"""
# The model file: with HALF_HEAD its output is rounded to float16 in every precision, the float64 reference's too.
MODEL = textwrap.dedent("""
    import torch

    HALF_HEAD = False


    class Field(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner, self.outer = torch.nn.Linear(3, 16), torch.nn.Linear(16, 3)

        def forward(self, t, y):
            out = self.outer(torch.tanh(self.inner(y)))
            return out.half().to(y.dtype) if HALF_HEAD else out
""")
HALF_MODEL = MODEL.replace("HALF_HEAD = False", "HALF_HEAD = True")


def user_model(folder: Path) -> tuple[str, Path]:
    """A factory file and the model file it imports, in `folder`: (the --model spec, the model file)."""
    module = f"field_{abs(hash(str(folder)))}"
    (folder / "factory.py").write_text(FACTORY.format(module=module))
    model = folder / f"{module}.py"
    model.write_text(MODEL)
    return f"{folder / 'factory.py'}:make", model


def sweep(spec: str, out: Path, *more: str):
    done = run_cli("sweep", "--model", spec, *TINY, "--out", out, *more)
    assert done.exit_code == 0, done.output
    return done


def settings(folder: Path) -> dict:
    return json.loads((folder / "manifest.json").read_text())["settings"]


@pytest.mark.slow  # two sweeps of two configurations and a check: about 10-20 s on a loaded 2-core machine
def test_check_names_the_changed_model_file_and_says_per_configuration_that_the_reference_moved(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the recorded paths are relative to the current folder, as a spec's is given
    spec, model = user_model(tmp_path)
    sweep(spec, tmp_path / "baseline")
    model.write_text(HALF_MODEL)
    sweep(spec, tmp_path / "new")
    before, after = settings(tmp_path / "baseline"), settings(tmp_path / "new")
    assert set(before["user_files"]) == set(after["user_files"]) == {model.name}
    assert before["user_files"][model.name] != after["user_files"][model.name]
    assert before["user_code"] == after["user_code"]  # the factory's own file did not change

    checked = run_cli("check", tmp_path / "new", "--baseline", tmp_path / "baseline", columns=WIDE_TABLES)
    assert checked.exit_code == 1, checked.output
    said = [line for line in checked.stdout.splitlines() if "code differs" in line]
    changed = f"the code differs from the baseline's: {model.name} changed"
    assert said == [f"{changed}; the errors are compared across that change"], checked.stdout
    sides = ("new", "baseline")
    comparison = compare(*(pd.read_parquet(f"{side}/results.parquet") for side in sides))
    judged = comparison.configurations
    assert len(judged) == 2 and (judged["verdict"] == "reference moved").all(), judged
    assert judged["reasons"].str.startswith("its float64 reference changed (reference_").all()
    assert "failed: 2 references moved" in checked.stdout and "unchanged" not in checked.stdout
    # The case: by their distance from the fine reference alone (which moved with them), some references do
    # not move, and their configurations' errors would have been judged against a reference that got worse.
    without = compare(
        *(pd.read_parquet(f"{side}/results.parquet").drop(columns=list(REFERENCE_NORM_COLUMNS)) for side in sides)
    ).configurations
    assert (without["verdict"] != "reference moved").any(), without

    same = run_cli("check", tmp_path / "new", "--baseline", tmp_path / "new")
    assert same.exit_code == 0 and "code differs" not in same.stdout and "reference" not in same.stdout


@pytest.mark.slow  # two sweeps of two configurations: about 10 s
def test_a_resume_sets_aside_the_shards_of_a_model_file_that_changed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec, model = user_model(tmp_path)
    sweep(spec, tmp_path / "sweep")
    model.write_text(HALF_MODEL)
    resumed = sweep(spec, tmp_path / "sweep")
    notes = [line for line in resumed.stdout.splitlines() if "set aside" in line]
    assert len(notes) == 1 and "changed: user_files" in notes[0], resumed.stdout
    fresh = sweep(spec, tmp_path / "fresh")
    assert fresh.exit_code == 0
    columns = ["sol_rel_err", *REFERENCE_NORM_COLUMNS]
    assert pd.read_parquet("sweep/results.parquet")[columns].equals(pd.read_parquet("fresh/results.parquet")[columns])
    # Loaded a third time, the model file is imported already: found from the factory's globals, with the same digest.
    assert settings(tmp_path / "fresh")["user_files"] == settings(tmp_path / "sweep")["user_files"]


@pytest.mark.unit
def test_the_files_of_a_users_package_are_found_and_installed_ones_are_not(tmp_path, monkeypatch):
    """A factory in a package of the user's, importing a sibling module and a helper module it only refers to: each
    file is listed with its digest, torch's and the standard library's are not."""
    name = f"userpkg_{abs(hash(str(tmp_path)))}"
    package = tmp_path / name
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "layers.py").write_text("import json\nimport torch\n\n\nclass Block(torch.nn.Linear):\n    pass\n")
    (package / "helpers.py").write_text("SCALE = 1.0\n")
    (package / "factory.py").write_text(
        "import torch\n\nfrom . import helpers\nfrom .layers import Block\n\n\n"
        "def make():\n    return Block(3, 3), torch.ones(2, 3), lambda trajectory: trajectory[-1].sum()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    spec = f"{name}.factory:make"
    load_attribute("model", spec, "module:object")
    found = user_files([spec])
    assert set(found) == {f"{name}/__init__.py", f"{name}/layers.py", f"{name}/helpers.py"}, found
    assert found[f"{name}/layers.py"] == hashlib.sha256((package / "layers.py").read_bytes()).hexdigest()


@pytest.mark.unit
def test_each_file_is_named_changed_added_or_removed():
    old = {"model.py": "a", "layers.py": "b", "gone.py": "c"}
    new = {"model.py": "a", "layers.py": "B", "extra.py": "d"}
    assert file_changes(new, old) == [("layers.py", "changed"), ("extra.py", "added"), ("gone.py", "removed")]
    assert file_changes(old, old) == []


def test_references_moved_within_the_tolerance_are_unchanged_and_beyond_it_are_named(tiny_sweep, tmp_path):
    """A baseline whose references' norms differ by half the tolerance (more than a float64 solve on another CPU: see
    docs/ci.md) compares unchanged; one whose norms differ by 1e-4 of themselves and whose errors were 10 times as
    large is 'reference moved' in every ok configuration, not an improvement."""
    results = pd.read_parquet(tiny_sweep / "results.parquet")
    assert results[list(REFERENCE_NORM_COLUMNS)].notna().any().all(), "the sweep should record its references' norms"
    near = results.copy()
    near[list(REFERENCE_NORM_COLUMNS)] *= 1 + NORM_RTOL / 2
    assert compare(results, near).counts()["reference moved"] == 0

    far = results.copy()
    far[list(REFERENCE_NORM_COLUMNS)] *= 1 + 1e-4
    far["grad_y0_rel_err"] *= 10
    comparison = compare(results, far)
    ok = comparison.configurations[comparison.configurations["status_new"] == "ok"]
    assert len(ok) and (ok["verdict"] == "reference moved").all()
    assert comparison.counts()["improvement"] == 0 and comparison.regressed
    assert ok["reasons"].str.contains("they moved with it: grad_y0_rel_err").all()


def test_a_baseline_without_reference_norms_still_compares_and_says_so(tiny_sweep, tmp_path):
    """A baseline from before the norms were recorded (tables version 1): the check passes and says the
    baseline's references were not compared by their norms."""
    older = tmp_path / "older.parquet"
    pd.read_parquet(tiny_sweep / "results.parquet").drop(columns=list(REFERENCE_NORM_COLUMNS)).to_parquet(older)
    checked = run_cli("check", tiny_sweep / "results.parquet", "--baseline", older)
    assert checked.exit_code == 0, checked.output
    said = [line for line in checked.stdout.splitlines() if "did not record its float64 references' norms" in line]
    assert len(said) == 1 and "only their distances from the fine reference (disc_*) were compared" in said[0]
