"""The fingerprint as versioned data: a folder written by the previous version (a committed report folder as that
version wrote it, kept in tests/fixtures; its fingerprint held the grid's prose) resumes as the same sweep with its
shards kept, a folder of the present version likewise, and either is refused for a sweep that differs in any axis or
setting: nothing of another sweep is mixed in."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from roundoff_analyzer import api
from roundoff_analyzer.core.errors import InputError
from roundoff_analyzer.execution import engine
from roundoff_analyzer.planning.fingerprint import FINGERPRINT_VERSION, every_version, same_sweep
from roundoff_analyzer.planning.manifest import fingerprint
from roundoff_analyzer.storage.results import ResultStore

REPORTS = Path(__file__).resolve().parent.parent / "reports"
# reports/otflow-cpu's manifest and shards as the previous version wrote them (before the reports were run again), and
# reports/otflow-which-module's manifest of then.
VERSION_1 = Path(__file__).resolve().parent / "fixtures" / "otflow-cpu-v1"
VERSION_1_WHICH_MODULE = Path(__file__).resolve().parent / "fixtures" / "otflow-which-module-v1-manifest.json"

# reports/otflow-cpu's sweep, as its manifest records it.
OTFLOW_CPU = {
    "timesteps": [8, 32, 128],
    "method": ["euler", "rk4"],
    "options": {"d": 8, "hidden": 32, "batch": 64},
    "device": "cpu",
}
CHANGED = {
    "timesteps": {"timesteps": [8, 32]},
    "dtype": {"dtype": ["float16"]},
    "scaling": {"scaling": ["none", "grad"]},
    "model option": {"options": {"d": 8, "hidden": 16, "batch": 64}},
}


def planned_fingerprint(tmp_path: Path, **changes) -> dict:
    return fingerprint(api.plan_sweep("otflow", out=tmp_path / "unused", **{**OTFLOW_CPU, **changes}).plan)


def drawing(wanted: dict) -> dict:
    """`wanted` as a step drawing random numbers would have it (the same grid and model otherwise)."""
    draws = {"functions": {"randn_like": 1}, "tensors": 1, "numbers": 32, "numpy": False, "python": False}
    return {**wanted, "draws": draws}


@pytest.fixture(scope="module")
def wanted(tmp_path_factory) -> dict:
    return planned_fingerprint(tmp_path_factory.mktemp("plan"))


@pytest.fixture(scope="module")
def changed(tmp_path_factory, wanted) -> dict[str, dict]:
    folder = tmp_path_factory.mktemp("changed")
    return {**{name: planned_fingerprint(folder, **c) for name, c in CHANGED.items()}, "draws": drawing(wanted)}


def committed_copy(tmp_path: Path) -> Path:
    folder = tmp_path / "otflow-cpu"
    shutil.copytree(REPORTS / "otflow-cpu", folder)
    return folder


def version_1_copy(tmp_path: Path) -> Path:
    folder = tmp_path / "otflow-cpu-v1"
    shutil.copytree(VERSION_1, folder)
    return folder


def new_version_folder(tmp_path: Path, wanted: dict) -> Path:
    """A folder of the present version: the committed shards under a manifest this version wrote."""
    folder = committed_copy(tmp_path)
    store = ResultStore(folder)
    store.open({**json.loads((folder / "manifest.json").read_text()), "fingerprint": wanted})
    store.close()
    return folder


def test_a_version_1_folder_holds_a_fingerprint_that_is_the_same_sweep_as_its_config_planned_now(wanted):
    found = json.loads((VERSION_1 / "manifest.json").read_text())["fingerprint"]
    assert "version" not in found and "description" in found["grid"]
    assert wanted["version"] == FINGERPRINT_VERSION and "description" not in wanted["grid"]
    assert same_sweep(found, wanted) and found in every_version(wanted)


@pytest.mark.parametrize("axis", [*CHANGED, "draws"])
def test_a_version_1_folder_is_another_sweep_for_a_changed_axis_or_setting(axis, changed):
    found = json.loads((VERSION_1 / "manifest.json").read_text())["fingerprint"]
    assert not same_sweep(found, changed[axis])


@pytest.mark.parametrize("version", ["version 1", "version 2"])
def test_a_folder_of_either_version_resumes_with_every_shard_kept(tmp_path, wanted, version):
    folder = version_1_copy(tmp_path) if version == "version 1" else new_version_folder(tmp_path, wanted)
    n_shards = len(list((folder / "shards").glob("*.parquet")))
    ResultStore(folder).check(wanted)  # the same sweep: not refused
    store = ResultStore(folder)
    store.open({**json.loads((folder / "manifest.json").read_text()), "fingerprint": wanted})
    try:
        kept = store.completed()
    finally:
        store.close()
    assert len(kept) == n_shards == 42 and not store.set_aside
    # Resumed, the folder holds this version's fingerprint, and the shards written before still count.
    assert json.loads((folder / "manifest.json").read_text())["fingerprint"] == wanted
    assert len(ResultStore(folder, wanted).completed()) == 42


@pytest.mark.parametrize("axis", [*CHANGED, "draws"])
@pytest.mark.parametrize("version", ["version 1", "version 2"])
def test_a_folder_of_either_version_is_refused_for_a_changed_axis_and_its_shards_are_not_reused(
    tmp_path, wanted, changed, version, axis
):
    folder = version_1_copy(tmp_path) if version == "version 1" else new_version_folder(tmp_path, wanted)
    with pytest.raises(InputError, match="holds a different sweep"):
        ResultStore(folder).check(changed[axis])
    # A store of the other sweep (as a worker's or an interrupted run's) counts none of the folder's shards.
    other = ResultStore(folder, changed[axis])
    assert other.completed() == set() and len(other.set_aside) == 42


def test_every_committed_sweep_folder_has_a_fingerprint_of_a_known_version():
    for path in REPORTS.rglob("manifest.json"):
        found = json.loads(path.read_text())["fingerprint"]
        assert found.get("version", 1) in (1, FINGERPRINT_VERSION), path


def test_a_version_1_folder_with_an_axis_off_its_default_is_the_same_sweep_as_its_config_planned_now(tmp_path):
    # reports/otflow-which-module keeps modules in float32: version 1 named that axis, and its count in the prose.
    found = json.loads(VERSION_1_WHICH_MODULE.read_text())["fingerprint"]
    settings = {
        "method": ["euler"],
        "library": ["torchdiffeq", "native"],
        "dtype": ["float16"],
        "scaling": ["none", "grad", "dynamic"],
        "keep_float32": ["none", "potential.opening", "potential.gradient_and_trace"],
        "options": {"d": 8, "hidden": 32, "batch": 64, "alpha": [1.0, 200000.0, 80000.0]},
    }
    wanted = planned_fingerprint(tmp_path, **settings)
    assert "keep_float32" in found["grid"] and same_sweep(found, wanted)
    assert not same_sweep(found, planned_fingerprint(tmp_path, **{**settings, "keep_float32": ["none"]}))


def test_resuming_a_committed_folder_reuses_every_shard_and_runs_nothing(tmp_path):
    folder = committed_copy(tmp_path)
    planned = api.plan_sweep("otflow", out=folder, **OTFLOW_CPU)
    outcome = engine.run(planned.plan, planned.out)
    assert (outcome.n_reused, outcome.n_run) == (42, 0)
    assert json.loads((folder / "manifest.json").read_text())["fingerprint"]["version"] == FINGERPRINT_VERSION
