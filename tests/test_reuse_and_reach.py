"""Nothing reused that does not match, nothing touched outside what is ours, every folder read in one line.

One test (or a few) per case, each on the real CLI in a temporary folder: the exit code, the one line it
says, and what the folders hold before and after.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from .conftest import results, run_cli, snapshot

REPOSITORY = Path(__file__).resolve().parent.parent
# 2 n_timesteps x euler x float16 without scaling on native: 2 configurations of a few hundredths of a second.
SMALL = [
    "--timesteps",
    "2,4",
    "--method",
    "euler",
    "--dtype",
    "float16",
    "--scaling",
    "none",
    "--device",
    "cpu",
    "--no-report",
]
FACTORY = """
import torch


class Field(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(3, 3)

    def forward(self, t, y):
        return {body}


def make(seed: int = 0):
    return Field(), torch.ones(4, 3), lambda trajectory: (trajectory[-1] ** 2).mean()
"""


def one_error_line(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def shard_names(folder: Path) -> set[str]:
    return {p.name for p in (folder / "shards").glob("*.parquet")}


@pytest.fixture(scope="module")
def small_sweep(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("small") / "sweep"
    done = run_cli("sweep", "--model", "linear", *SMALL, "--out", out)
    assert done.exit_code == 0, done.output
    return out


# --- 1. a resume reuses no row that a changed setting would change --------------------------------------------------


def test_a_resume_without_the_time_limit_runs_the_timed_out_rows_again(tmp_path):
    out = tmp_path / "sweep"
    limited = run_cli("sweep", "--model", "linear", *SMALL, "--timeout", "0.001", "--out", out)
    assert limited.exit_code == 0, limited.output
    assert set(results(out)["failure_class"].dropna()) == {"timeout"}, results(out)  # before: these were reused
    before = shard_names(out)
    resumed = run_cli("sweep", "--model", "linear", *SMALL, "--out", out)
    assert resumed.exit_code == 0, resumed.output
    notes = [line for line in resumed.stdout.splitlines() if "set aside" in line]
    assert len(notes) == 1 and "written with other settings (changed: timeout_s)" in notes[0], resumed.stdout
    assert set(results(out)["status"]) == {"ok"} and shard_names(out) == before
    assert {p.name for p in (out / "set_aside").iterdir()} == before  # kept, not deleted


def test_an_edited_factory_file_is_not_reused(tmp_path):
    factory, out = tmp_path / "field.py", tmp_path / "sweep"
    factory.write_text(FACTORY.format(body="torch.tanh(self.layer(y))"))
    first = run_cli("sweep", "--model", f"{factory}:make", *SMALL, "--out", out)
    assert first.exit_code == 0, first.output
    old = results(out).set_index("n_timesteps")["sol_rel_err"]
    factory.write_text(FACTORY.format(body="torch.sin(3 * self.layer(y))"))  # another vector field, the same weights
    second = run_cli("sweep", "--model", f"{factory}:make", *SMALL, "--out", out)
    assert second.exit_code == 0, second.output
    notes = [line for line in second.stdout.splitlines() if "set aside" in line]
    assert len(notes) == 1 and "changed: user_code" in notes[0], second.stdout
    fresh = run_cli("sweep", "--model", f"{factory}:make", *SMALL, "--out", tmp_path / "fresh")
    assert fresh.exit_code == 0, fresh.output
    new = results(out).set_index("n_timesteps")["sol_rel_err"]
    assert new.equals(results(tmp_path / "fresh").set_index("n_timesteps")["sol_rel_err"]) and not new.equals(old)


def test_check_says_in_one_line_that_the_baselines_model_ran_other_code(tmp_path):
    # The same factory name and weights; its file edited between the baseline and the new sweep. The errors are
    # compared (editing one's own model is what a regression check is for), and one line says the code differs.
    factory = tmp_path / "field.py"
    source = FACTORY.format(body="torch.tanh(self.layer(y))")
    factory.write_text(source)
    assert run_cli("sweep", "--model", f"{factory}:make", *SMALL, "--out", tmp_path / "baseline").exit_code == 0
    factory.write_text(source + "# the same field, other code\n")
    assert run_cli("sweep", "--model", f"{factory}:make", *SMALL, "--out", tmp_path / "new").exit_code == 0
    old, new = (
        json.loads((tmp_path / name / "manifest.json").read_text())["settings"]["user_code"][f"{factory}:make"]
        for name in ("baseline", "new")
    )
    assert old != new

    checked = run_cli("check", tmp_path / "new", "--baseline", tmp_path / "baseline")
    assert checked.exit_code == 0, checked.output
    said = [line for line in checked.stdout.splitlines() if "code differs" in line]
    assert said == [
        f"the code differs from the baseline's: {factory}:make (sha256 {new[:12]} now, {old[:12]} in the baseline); "
        "the errors are compared across that change"
    ], checked.stdout
    same = run_cli("check", tmp_path / "new", "--baseline", tmp_path / "new")
    assert same.exit_code == 0 and "code differs" not in same.stdout


# --- 2. nothing outside what is ours is written or deleted -----------------------------------------------------------


def test_a_link_below_the_yardsticks_is_refused_before_anything_is_written(tmp_path):
    out, elsewhere = tmp_path / "sweep", tmp_path / "elsewhere"
    (out / "yardsticks").mkdir(parents=True)
    elsewhere.mkdir()
    (out / "yardsticks" / "checkpoint").symlink_to(elsewhere)
    before = snapshot(tmp_path)
    refused = run_cli("sweep", "--model", "linear", *SMALL, "--out", out)
    assert refused.exit_code == 2 and "is a symbolic link" in one_error_line(refused) and refused.stdout == ""
    assert snapshot(tmp_path) == before and not any(elsewhere.iterdir())


def test_a_resumed_training_follows_no_link_below_its_setups(tmp_path):
    out, elsewhere = tmp_path / "train", tmp_path / "elsewhere"
    trained = run_cli("train", "--model", "linear", "--iters", "2", "--dtype", "float32,bfloat16", "--out", out)
    assert trained.exit_code == 0, trained.output
    setup = next((out / "setups").iterdir())
    setup.rename(elsewhere)
    setup.symlink_to(elsewhere)  # before the fix: the resume wrote its new checkpoint and resume/state.pt there
    before = snapshot(tmp_path)
    refused = run_cli("train", "--model", "linear", "--iters", "4", "--dtype", "float32,bfloat16", "--out", out)
    assert refused.exit_code == 2 and "is a symbolic link" in one_error_line(refused) and refused.stdout == ""
    assert snapshot(tmp_path) == before


def test_a_training_with_force_leaves_a_sweep_folder_alone(tmp_path):
    out = tmp_path / "sweep"
    done = run_cli("sweep", "--model", "linear", *SMALL[:-1], "--out", out)  # with its report and figures
    assert done.exit_code == 0, done.output
    assert any((out / "figures").iterdir())
    before = snapshot(tmp_path)
    refused = run_cli("train", "--model", "linear", "--iters", "2", "--force", "--out", out)
    assert refused.exit_code == 2 and "holds a sweep" in one_error_line(refused)
    assert snapshot(tmp_path) == before


def test_an_empty_out_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for command in (["sweep", "--model", "linear", *SMALL], ["train", "--model", "linear", "--iters", "2"]):
        refused = run_cli(*command, "--out", "")
        assert refused.exit_code == 2 and "--out is empty" in one_error_line(refused)
    assert list(tmp_path.iterdir()) == []


# --- 3. every table and JSON read through one schema, one line when it does not fit ---------------------------------


def _set(column: str, make):
    def edit(folder: Path, name: str = "results.parquet") -> None:
        table = pq.read_table(folder / name)
        index = table.column_names.index(column)
        pq.write_table(table.set_column(index, column, make(table.column(column))), folder / name)

    return edit


def _drop(column: str, name: str):
    return lambda folder: pq.write_table(pq.read_table(folder / name).drop_columns([column]), folder / name)


def _manifest(edit):
    def write(folder: Path) -> None:
        manifest = json.loads((folder / "manifest.json").read_text())
        edit(manifest)
        (folder / "manifest.json").write_text(json.dumps(manifest))

    return write


# (damage, what the line names); before the fix each of these ended in a traceback in report, show or check.
DAMAGE = {
    "n_timesteps as text": (
        _set("n_timesteps", lambda c: pa.array([str(v) for v in c.to_pylist()])),
        "column n_timesteps holds string",
    ),
    "errors as text": (
        _set("sol_rel_err", lambda c: pa.array([str(v) for v in c.to_pylist()])),
        "column sol_rel_err holds string",
    ),
    "n_timesteps empty": (_set("n_timesteps", lambda c: pa.nulls(len(c), pa.int64())), "column n_timesteps is empty"),
    "no unit_roundoff": (_drop("unit_roundoff", "results.parquet"), "unit_roundoff (double) missing"),
    "no profile phase": (
        _drop("phase", "profile.parquet"),
        "profile.parquet' is not a range profile table: column(s) phase",
    ),
    "no parameter": (
        _drop("parameter", "param_errors.parquet"),
        "param_errors.parquet' is not a parameter errors table",
    ),
    "scaler as a list": (_manifest(lambda m: m.update(scaler=[1])), "key scaler must be"),
    "init_scale as text": (
        _manifest(lambda m: m["scaler"].update(init_scale="x")),
        "key scaler.init_scale must be a number",
    ),
    "nested manifest": (lambda f: (f / "manifest.json").write_text("[" * 100_000 + "]" * 100_000), "nested too deeply"),
}
# Which commands read which file.
READERS = {
    "results": ("report", "show", "check"),
    "profile": ("report",),
    "param": ("report",),
    "manifest": ("report", "check"),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_folder_is_one_line_naming_file_and_column(tmp_path, small_sweep, damage):
    edit, named = DAMAGE[damage]
    folder = tmp_path / "sweep"
    shutil.copytree(small_sweep, folder)
    edit(folder)
    kind = (
        "manifest"
        if "manifest" in named or "key" in named or "nested" in named
        else "profile"
        if "profile" in named
        else "param"
        if "param" in named
        else "results"
    )
    before = snapshot(tmp_path)
    for command in READERS[kind]:
        args = {
            "report": ["report", folder],
            "show": ["show", folder],
            "check": ["check", folder, "--baseline", small_sweep],
        }[command]
        refused = run_cli(*args)
        line = one_error_line(refused)
        assert refused.exit_code == 2 and named in line and str(folder) in line, (command, line)
        assert snapshot(tmp_path) == before, command


def _truncate_log(folder: Path) -> None:
    log = folder / "training_log.parquet"
    log.write_bytes(log.read_bytes()[:200])  # before: "Parquet magic bytes not found"


def _setups_as_text(folder: Path) -> None:
    manifest = json.loads((folder / "train_manifest.json").read_text())
    (folder / "train_manifest.json").write_text(json.dumps({**manifest, "setups": "float32"}))  # before: AttributeError


@pytest.mark.parametrize(
    "edit, named",
    [
        (_truncate_log, "training_log.parquet' as a training log"),
        (_setups_as_text, "train_manifest.json' is not a training manifest: key setups must be a list"),
    ],
)
def test_a_damaged_training_folder_is_one_line(tmp_path, edit, named):
    folder = tmp_path / "train"
    shutil.copytree(REPOSITORY / "reports" / "cnf-train", folder)
    edit(folder)
    before = snapshot(tmp_path)
    refused = run_cli("report", folder)
    assert refused.exit_code == 2 and named in one_error_line(refused)
    assert snapshot(tmp_path) == before


def test_nested_toml_and_checkpoint_side_files_are_one_line(tmp_path):
    bomb = tmp_path / "bomb.toml"
    bomb.write_text("x = " + "[" * 100_000 + "]" * 100_000)
    refused = run_cli("sweep", "--model", "linear", "--config", bomb, *SMALL, "--out", tmp_path / "a")
    assert refused.exit_code == 2 and "nested too deeply" in one_error_line(refused)
    trained = run_cli("train", "--model", "linear", "--iters", "1", "--out", tmp_path / "train")
    assert trained.exit_code == 0, trained.output
    weights = next((tmp_path / "train" / "checkpoints").glob("*.pt"))
    weights.with_suffix(".json").write_text('{"iteration": ' + "[" * 100_000 + "]" * 100_000 + "}")
    refused = run_cli("sweep", "--model", "linear", "--checkpoint", weights, *SMALL, "--out", tmp_path / "b")
    assert refused.exit_code == 2 and "nested too deeply" in one_error_line(refused)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bomb.toml", "train"]


def test_the_folders_this_project_wrote_still_read():
    from roundoff_analyzer.report import read_sweep_folder
    from roundoff_analyzer.storage.results import load_results
    from roundoff_analyzer.training.log import read_log

    for manifest in sorted((REPOSITORY / "reports").glob("**/manifest.json")):
        folder = read_sweep_folder(manifest.parent)
        assert len(folder.results) and folder.manifest
        assert (folder.profile is not None) == (manifest.parent / "profile.parquet").is_file()
    assert len(load_results(REPOSITORY / "reports" / "baselines" / "otflow-ci"))
    assert len(read_log(REPOSITORY / "reports" / "cnf-train" / "training_log.parquet"))


# --- 4. user code that quits or cannot be read is a failure in one line ---------------------------------------------


@pytest.mark.parametrize(
    "code, model, expected",
    [
        ("import sys\ndef make(seed: int = 0):\n    sys.exit(0)\n", "{file}:make", "the factory called sys.exit(0)"),
        ("import sys\nsys.exit(0)\n", "{file}:make", "called sys.exit(0)"),
        (
            "import torch\ndef make(w: torch.Tensor = None, seed: int = 0):\n    pass\n",
            "{file}:make",
            "option 'w' is annotated Tensor",
        ),
    ],
)
def test_a_factory_that_quits_or_cannot_be_read_is_one_line(tmp_path, code, model, expected):
    (tmp_path / "user.py").write_text(code)
    refused = run_cli("sweep", "--model", model.format(file=tmp_path / "user.py"), *SMALL, "--out", tmp_path / "out")
    # before: exit 0 and nothing said, or a traceback
    assert refused.exit_code == 2 and expected in one_error_line(refused)
    assert not (tmp_path / "out").exists()


def test_a_library_that_quits_is_one_line(tmp_path):
    plugin = tmp_path / "quitting.py"
    plugin.write_text(
        "import sys\nfrom roundoff_analyzer.axes.libraries.native import NativeLibrary\n\n\nclass "
        "Quitting(NativeLibrary):\n"
        "    name = 'quitting'\n\n    def solve(self, *args, **kwargs):\n        sys.exit(3)\n"
    )
    for library, expected in (("sys:exit", "called sys.exit(None)"), (f"{plugin}:Quitting", "called sys.exit(3)")):
        out = tmp_path / "out"
        refused = run_cli("sweep", "--model", "linear", "--library", library, *SMALL, "--out", out)
        assert refused.exit_code == 2 and expected in one_error_line(refused), refused.output
        assert not shard_names(out)


def test_values_of_the_wrong_type_are_refused(tmp_path):
    (tmp_path / "sweep.toml").write_text("timesteps = [true]\n")
    refused = run_cli("sweep", "--model", "linear", "--config", tmp_path / "sweep.toml", "--out", tmp_path / "out")
    assert refused.exit_code == 2 and "'timesteps' must be numbers, not true or false" in one_error_line(refused)
    refused = run_cli("train", "--model", "linear", "--lr", "inf", "--out", tmp_path / "train")
    assert refused.exit_code == 2 and "'lr'" in one_error_line(refused) and "finite" in one_error_line(refused)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sweep.toml"]


# --- 5. no process outlives its sweep --------------------------------------------------------------------------------


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_bytes().rpartition(b")")[2].split()[0].decode()
    except OSError:
        return "gone"


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and int((entry / "stat").read_bytes().rpartition(b")")[2].split()[1]) == pid:
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from Linux's /proc")
def test_workers_and_fork_server_end_with_a_killed_sweep_that_is_not_reaped(tmp_path):
    out = tmp_path / "sweep"
    grid = [
        "--model",
        "linear",
        "--timesteps",
        "2,4,8,16,32,64,128,256",
        "--method",
        "euler,rk4",
        "--device",
        "cpu",
        "--no-report",
    ]
    sweep = subprocess.Popen(
        [sys.executable, "-m", "roundoff_cli", "sweep", *grid, "--workers", "2", "--out", out],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while True:  # until a worker (a child of the fork server) is measuring
            assert sweep.poll() is None, "the sweep ended before a worker started"
            workers = [g for child in _children(sweep.pid) for g in _children(child)]
            if workers and shard_names(out):
                break
            time.sleep(0.02)
        time.sleep(0.3)
        family = [*_children(sweep.pid), *workers]
        os.kill(sweep.pid, signal.SIGKILL)  # and not reaped: it stays a zombie until sweep.wait() below
        while _state(sweep.pid) not in ("Z", "gone"):
            time.sleep(0.001)
        written = shard_names(out)
        assert _state(sweep.pid) == "Z"
        time.sleep(1.0)
        assert {pid: _state(pid) for pid in family} == {
            pid: _state(pid) for pid in family if _state(pid) in ("Z", "gone")
        }
        time.sleep(1.0)
        assert shard_names(out) == written  # before the fix: 1 shard at the kill, 35 five seconds later
    finally:
        for pid in _children(sweep.pid):
            for grandchild in _children(pid):
                os.kill(grandchild, signal.SIGKILL)
        sweep.wait()


def test_a_link_that_stays_inside_an_entry_is_allowed_one_that_leaves_is_not(tmp_path):
    # submitit links its own files inside <out>/slurm/: harmless, as nothing through them leaves the folder.
    from roundoff_analyzer.core.errors import InputError
    from roundoff_analyzer.core.safe_files import refuse_links

    slurm = tmp_path / "out" / "slurm"
    slurm.mkdir(parents=True)
    (slurm / "6_submission.sh").write_text("#!/bin/sh\n")
    (slurm / ".submission_file_6.sh").symlink_to(slurm / "6_submission.sh")
    refuse_links(tmp_path / "out", ["slurm"])
    (slurm / "away").symlink_to(tmp_path)
    with pytest.raises(InputError, match="is a symbolic link"):
        refuse_links(tmp_path / "out", ["slurm"])
