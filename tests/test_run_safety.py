"""Never a user's file lost, never a run that cannot be stopped: each case on the real command line.

Cases: a folder of the user's own (refused, --force included), a runaway size (refused before anything is allocated:
every such command runs under an address-space limit of 4 GB), SIGTERM (stops within seconds, exit 143), a shard
edited by hand (set aside), rows from another environment (said by show, the report and check), and the smaller
ones: an output folder that cannot be created, every unknown key of a config at once, breakpoint() in a user's model.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from roundoff_analyzer.measuring.environment_columns import ENVIRONMENT_COLUMNS
from roundoff_analyzer.measuring.memory import capacity_bytes, fine_reference_oom

from .conftest import WIDE_TABLES, as_written_before_content_hashes, results, run_cli, snapshot

REPO = Path(__file__).resolve().parents[1]
SMALL = ["--model", "linear", "--timesteps", "2,4", "--method", "euler", "--device", "cpu", "--no-report"]
RUNAWAY = "100000000"  # the size that grew to 15.6 GB before it was bounded
MEMORY_LIMIT = 4_000_000_000  # bytes of address space for a command that must refuse before allocating


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def cli(*args, limit_memory: bool = False, timeout: float = 300, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "roundoff_cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        preexec_fn=_limited if limit_memory else None,
        **kwargs,
    )


def here(*args, columns: int | None = WIDE_TABLES) -> subprocess.CompletedProcess:
    """`roundoff ARGS` in this process (no torch import to wait for), as a CompletedProcess."""
    result = run_cli(*args, columns=columns)
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr)


def one_error_line(run: subprocess.CompletedProcess) -> str:
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert run.returncode == 2 and run.stdout == "" and len(lines) == 1 and lines[0].startswith("error: "), (
        run.stdout,
        run.stderr,
    )
    return lines[0]


def users_folder(root: Path) -> Path:
    paper = root / "paper"
    (paper / "figures").mkdir(parents=True)
    (paper / "report.md").write_text("# My paper's report\n")
    (paper / "figures" / "error_solution.png").write_bytes(b"my figure")
    return paper


# --- a user's folder --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("force", [False, True])
def test_a_sweep_never_writes_into_a_users_folder(tmp_path, force):
    paper = users_folder(tmp_path)
    before = snapshot(tmp_path)
    line = one_error_line(here("sweep", *SMALL, "--out", paper, *(["--force"] if force else [])))
    assert "holds files roundoff did not write (figures/, report.md)" in line and "--force included" in line
    assert snapshot(tmp_path) == before


def test_a_training_never_writes_into_a_users_folder(tmp_path):
    paper = users_folder(tmp_path)
    before = snapshot(tmp_path)
    line = one_error_line(here("train", "--model", "linear", "--iters", "2", "--out", paper, "--force"))
    assert "holds files roundoff did not write" in line and "a training writes only into an empty folder" in line
    assert snapshot(tmp_path) == before


def test_a_manifest_of_another_tool_is_the_users_file(tmp_path):
    out = tmp_path / "site"
    out.mkdir()
    (out / "manifest.json").write_text(json.dumps({"name": "my web app", "icons": []}))
    before = snapshot(tmp_path)
    assert "(manifest.json)" in one_error_line(here("sweep", *SMALL, "--out", out, "--force"))
    assert snapshot(tmp_path) == before


def test_an_empty_folder_and_the_sweeps_own_are_written(tmp_path):
    out = tmp_path / "empty"
    out.mkdir()
    assert here("sweep", *SMALL, "--out", out).returncode == 0
    again = here("sweep", *SMALL, "--out", out)  # the sweep's own folder: resumed, nothing to run
    assert again.returncode == 0 and len(results(out)) == 14


# --- runaway sizes ----------------------------------------------------------------------------------------------------


def test_a_runaway_grid_is_refused_in_one_line_before_anything_is_allocated(tmp_path):
    run = cli("sweep", "--model", "otflow", "--timesteps", RUNAWAY, "--out", tmp_path / "out", limit_memory=True)
    line = one_error_line(run)
    assert "the fine reference (400000000 RK4 steps) needs at least" in line and "--allow-oom" in line
    assert f"({capacity_bytes(__import__('torch').device('cpu')) / 1e9:.3g} GB)" in line
    assert not (tmp_path / "out").exists()


# With 2 workers the yardsticks' pieces are computed first, before any configuration (that start takes seconds: slow).
@pytest.mark.parametrize("workers", ["1", pytest.param("2", marks=pytest.mark.slow)])
def test_allow_oom_records_oom_rows_and_never_computes_what_cannot_fit(tmp_path, workers):
    out = tmp_path / "out"
    run = cli(
        "sweep",
        "--model",
        "linear",
        "--timesteps",
        f"4,{RUNAWAY}",
        "--method",
        "euler",
        "--allow-oom",
        "--workers",
        workers,
        "--no-report",
        "--out",
        out,
        limit_memory=True,
    )
    assert run.returncode == 0, run.stderr
    table = results(out)
    huge, small = table[table["n_timesteps"] == int(RUNAWAY)], table[table["n_timesteps"] == 4]
    assert (huge["status"] == "failed").all() and (huge["failure_class"] == "oom").all()
    assert (
        huge["failure_message"]
        .str.contains(r"need 38.4 GB \(100000001 states of 32 values each\); cpu has .* GB; not run")
        .all()
    )
    assert (small["status"] == "ok").all()
    assert small["disc_sol_rel_err"].isna().all()  # the fine reference, over the bound, was not computed


def test_the_fine_reference_bound_names_its_size_and_the_limit():
    import torch

    assert fine_reference_oom([8, 32], 64 * 3, torch.device("cpu")) is None
    reason = fine_reference_oom([int(RUNAWAY)], 64 * 3, torch.device("cpu"))
    assert (
        reason.startswith("oom: the fine reference (400000000 RK4 steps of 192 values) needs at least")
        and "not computed" in reason
    )


@pytest.mark.parametrize(
    "model, options",
    [
        ("otflow", {}),
        ("otflow", {"d": "3", "hidden": "7", "n_layers": "4", "batch": "5"}),
        ("cnf", {"hidden": "5", "width": "3", "batch": "7"}),
        ("linear", {"d": "6", "batch": "2"}),
    ],
)
def test_a_built_in_models_counted_size_is_what_it_builds(model, options):
    import torch

    from roundoff_analyzer.axes.models import parse_options, resolve_model
    from roundoff_analyzer.measuring.memory import problem_elements

    spec = resolve_model(model)
    parsed = parse_options(spec, options)
    problem = spec.build(parsed, torch.device("cpu"))
    built = problem.y0.numel() + sum(t.numel() for t in problem.func.state_dict().values())
    assert problem_elements(spec, parsed, None) == built


def test_planning_a_sweep_imports_no_dynamo():
    """Bounding the problem's memory once built it on the meta device, whose kernels import torch._dynamo (a second)."""
    script = (
        "import sys\n"
        "from roundoff_analyzer import api\n"
        "api.plan_sweep('otflow', timesteps=[8], workers=1)\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "False"


# --- SIGTERM ----------------------------------------------------------------------------------------------------------


def _shards(out: Path) -> list[Path]:
    return sorted((out / "shards").glob("*.parquet"))


# A user's model whose float16 runs take seconds per step (its float64 references and bfloat16 runs do not): a sweep
# that has finished its bfloat16 configurations is, for as long as the test needs, inside a float16 one.
SLOW_IN_FLOAT16 = """
import time
import torch
from damped_oscillator import DampedOscillator, damped_oscillator as fast


class Slow(DampedOscillator):
    def forward(self, t, y):
        if torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.float16:
            time.sleep(3)
        return super().forward(t, y)


def slow_in_float16(batch: int = 32, seed: int = 0):
    func, y0, loss = fast(batch=batch, seed=seed)
    slow = Slow(func.frequency, func.damping, func.correction[0].out_features)
    slow.load_state_dict(func.state_dict())
    return slow, y0, loss
"""


CONFIGURATIONS = 14  # the default triples at n_timesteps 2 and 4


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["1", "2"])
def test_sigterm_stops_within_seconds_keeping_what_is_finished(tmp_path, workers):
    (tmp_path / "slow_model.py").write_text(SLOW_IN_FLOAT16)
    out = tmp_path / "out"
    args = [
        "sweep",
        "--model",
        f"{tmp_path / 'slow_model.py'}:slow_in_float16",
        "-o",
        "batch=4",
        "--timesteps",
        "2,4",  # float16 groups of 6 and 12 s on each process: the SIGTERM lands inside one
        "--method",
        "euler",
        "--noise-batches",
        "0",
        "--device",
        "cpu",
        "--workers",
        workers,
        "--no-report",
        "--out",
        out,
    ]
    environment = {**os.environ, "PYTHONPATH": f"{REPO / 'examples'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    process = subprocess.Popen(
        [sys.executable, "-m", "roundoff_cli", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=environment,
        preexec_fn=_limited,
    )
    deadline = time.monotonic() + 240
    while (
        len(_shards(out)) < 2 and time.monotonic() < deadline and process.poll() is None
    ):  # the two bfloat16 configurations
        time.sleep(0.1)
    assert len(_shards(out)) >= 2, process.communicate()[1]
    time.sleep(2.0)  # inside a float16 configuration, each of which takes 6 s or more
    sent = time.monotonic()
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=120)
    seconds = time.monotonic() - sent
    print(f"SIGTERM to exit: {seconds:.2f} s with --workers {workers}")
    assert process.returncode == 143, stderr
    assert seconds < 25, f"{seconds:.1f} s: Slurm's SIGKILL comes about 30 s after its SIGTERM"
    done = results(out)
    assert 2 <= len(done) == len(_shards(out)) < CONFIGURATIONS and (done["status"] == "ok").all()
    assert "terminated: abandoning the configuration in progress" in stdout
    assert f"interrupted: {len(done)} of {CONFIGURATIONS} configurations are done and saved" in stderr


# --- shards that prove their content ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("finished") / "sweep"
    assert here("sweep", *SMALL, "--out", out).returncode == 0
    return out


def _edit_values_keeping_metadata(shard: Path) -> None:
    table = pq.read_table(shard)
    rows = table.to_pylist()
    rows[0]["sol_rel_err"] = 1e-30  # a better number than measured
    pq.write_table(
        pa.Table.from_pylist(rows, schema=table.schema).replace_schema_metadata(table.schema.metadata), shard
    )


def test_a_shard_edited_by_hand_is_set_aside_and_run_again(tmp_path, finished):
    out = tmp_path / "sweep"
    shutil.copytree(finished, out)
    shard = _shards(out)[0]
    _edit_values_keeping_metadata(shard)
    run = here("sweep", *SMALL, "--out", out)
    assert run.returncode == 0
    assert (
        "set aside 1 shard(s)" in run.stdout and "changed since it was written (its content hash differs)" in run.stdout
    )
    assert (out / "set_aside" / shard.name).is_file()
    pd.testing.assert_series_equal(results(out)["sol_rel_err"], results(finished)["sol_rel_err"])


def test_a_folder_from_before_content_hashes_resumes_whole(tmp_path, finished):
    out = tmp_path / "sweep"
    shutil.copytree(finished, out)
    as_written_before_content_hashes(out)
    run = here("sweep", *SMALL, "--out", out)
    assert run.returncode == 0 and "set aside" not in run.stdout
    assert len(list((out / "shards").glob("*.sha256"))) == 14 and not (out / "set_aside").exists()
    # From then on the hashes count: an edit now is found.
    _edit_values_keeping_metadata(_shards(out)[0])
    assert "set aside 1 shard(s)" in here("sweep", *SMALL, "--out", out).stdout


# --- environments -----------------------------------------------------------------------------------------------------


def _as_if_measured_elsewhere(folder: Path, rows: slice) -> None:
    table = pd.read_parquet(folder / "results.parquet")
    table.loc[table.index[rows], "torch_version"] = "2.0.0+elsewhere"
    table.loc[table.index[rows], "device_name"] = "Another CPU"
    table.to_parquet(folder / "results.parquet")


def test_rows_record_their_environment(finished):
    import torch

    table = results(finished)
    assert list(table[list(ENVIRONMENT_COLUMNS)].drop_duplicates()["torch_version"]) == [torch.__version__]
    assert table["device_name"].notna().all() and table["compute_capability"].isna().all()  # a CPU has none


def test_show_and_the_report_say_when_a_folder_mixes_environments(tmp_path, finished):
    out = tmp_path / "sweep"
    shutil.copytree(finished, out)
    assert "environments:" not in here("show", out).stdout
    _as_if_measured_elsewhere(out, slice(0, 3))
    shown = here("show", out)
    assert shown.returncode == 0
    import torch

    expected = f"(torch 2.0.0+elsewhere (3 rows) / {torch.__version__} (11 rows); device Another CPU (3 rows) / "
    assert f"environments: these rows were measured in more than one environment {expected}" in shown.stdout
    assert here("report", out).returncode == 0
    assert (
        "**Mixed environments:** These rows were measured in more than one environment"
        in (out / "report.md").read_text()
    )


def test_check_names_what_differs_from_the_baselines_environment(tmp_path, finished):
    baseline = tmp_path / "baseline"
    shutil.copytree(finished, baseline)
    _as_if_measured_elsewhere(baseline, slice(None))
    table = pd.read_parquet(baseline / "results.parquet")
    table["sol_rel_err"] = table["sol_rel_err"] / 1000  # so that the new rows are a regression
    table.to_parquet(baseline / "results.parquet")
    run = here("check", finished, "--baseline", baseline)
    assert run.returncode == 1
    assert "the environment differs from the baseline's: torch: 2.0.0+elsewhere in the baseline," in run.stdout
    assert "device: Another CPU in the baseline," in run.stdout


def test_a_baseline_from_before_the_environment_columns_still_checks(finished):
    run = here(
        "check",
        REPO / "reports" / "baselines" / "otflow-ci",
        "--baseline",
        REPO / "reports" / "baselines" / "otflow-ci",
    )
    assert run.returncode == 0 and "environment" not in run.stdout


# --- the smaller cases ------------------------------------------------------------------------------------------------


def test_an_output_folder_on_proc_is_refused_with_its_real_cause():
    if not Path("/proc/self").is_dir():
        pytest.skip("no /proc on this system")
    line = one_error_line(here("sweep", *SMALL, "--out", "/proc/x"))
    assert "'/proc' is on the proc filesystem" in line and "no such file" not in line


def test_every_unknown_key_of_a_config_in_one_message(tmp_path):
    config = tmp_path / "sweep.toml"
    config.write_text('model = "linear"\ntimestep = [2]\nmethods = ["euler"]\ndtypes = ["float16"]\n')
    line = one_error_line(here("sweep", "--config", config, "--out", tmp_path / "out"))
    assert "'timestep', 'methods', 'dtypes' unknown keys; allowed: model," in line


def test_a_breakpoint_in_a_users_model_does_nothing_in_a_sweep(tmp_path):
    source = (REPO / "examples" / "damped_oscillator.py").read_text()
    model = tmp_path / "stopping.py"
    model.write_text(
        source.replace(
            "        position, velocity = y[:, :1], y[:, 1:]\n",
            "        breakpoint()\n        position, velocity = y[:, :1], y[:, 1:]\n",
        )
    )
    assert "breakpoint()" in model.read_text()
    run = cli(
        "sweep",
        "--model",
        f"{model}:damped_oscillator",
        "-o",
        "batch=4",
        "--timesteps",
        "2",
        "--method",
        "euler",
        "--dtype",
        "float16",
        "--scaling",
        "none",
        "--library",
        "native",
        "--noise-batches",
        "0",
        "--no-report",
        "--out",
        tmp_path / "out",
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert "(Pdb)" not in run.stdout and (results(tmp_path / "out")["status"] == "ok").all()
