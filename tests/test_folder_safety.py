"""A results folder nothing can corrupt, and reading results never runs code.

Each test is named for the case it checks. Every test that writes asserts that nothing outside
its `--out` changed (a snapshot of the test's own folder, the output folder left out).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
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
import torch

from roundoff_analyzer.axes.grid import CONFIG_COLUMNS
from roundoff_analyzer.measuring.torch_state import autocast_nesting
from roundoff_analyzer.storage.shard_integrity import FINGERPRINT_KEY, fingerprint_digest

from .conftest import results, run_cli, snapshot

# 2 n_timesteps x euler x the default grid's 7 triples = 14 configurations of a few tenths of a second each, 4 reference
# groups.
GRID = ["--model", "linear", "--timesteps", "2,4", "--method", "euler", "--device", "cpu", "--no-report"]
N_CONFIGURATIONS = 14


# What decides a configuration's numbers (times and memory are measurements of the machine).
def decisive_columns(table):
    return [c for c in table.columns if not c.startswith("time_") and c != "peak_memory_bytes"]


def outside(tmp_path: Path, *outs: Path) -> dict:
    """Everything under tmp_path but the output folders."""
    return {
        k: v for k, v in snapshot(tmp_path).items() if not any(k == o.name or k.startswith(f"{o.name}/") for o in outs)
    }


def cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "roundoff_cli", *map(str, args)], capture_output=True, text=True, timeout=timeout
    )


def start(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "roundoff_cli", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def by_configuration(table: pd.DataFrame) -> pd.DataFrame:
    return table.sort_values(list(CONFIG_COLUMNS)).reset_index(drop=True)


def assert_same_numbers(folder: Path, reference: Path) -> None:
    table, expected = by_configuration(results(folder)), by_configuration(results(reference))
    assert len(table) == len(expected) and not table.duplicated(list(CONFIG_COLUMNS)).any()
    pd.testing.assert_frame_equal(
        table[decisive_columns(expected)], expected[decisive_columns(expected)], check_exact=True
    )


def shard_paths(out: Path) -> list[Path]:
    return sorted((out / "shards").glob("*.parquet"))


def assert_every_shard_is_this_sweeps(out: Path) -> None:
    digest = fingerprint_digest(json.loads((out / "manifest.json").read_text())["fingerprint"]).encode()
    assert all(pq.read_schema(p).metadata[FINGERPRINT_KEY] == digest for p in shard_paths(out))


def one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in stderr, stderr
    return lines[0]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("uninterrupted") / "sweep"
    assert run_cli("sweep", *GRID, "--out", out).exit_code == 0
    return out


# --- 1, 8: shards carry the sweep's fingerprint; foreign or damaged ones are set aside and run again ------------


def test_shards_of_another_sweep_are_set_aside_not_reused(tmp_path):
    out = tmp_path / "sweep"
    one = ["sweep", "--model", "linear", "--timesteps", "2", "--method", "euler", "--library", "native", "--no-report"]
    assert run_cli(*one, "-o", "d=4", "--out", out).exit_code == 0
    (out / "manifest.json").write_text("")  # the manifest lost: the shards must speak for themselves
    before = outside(tmp_path, out)

    rerun = run_cli(*one, "-o", "d=5", "--out", out)
    assert rerun.exit_code == 0, rerun.output
    n = len(results(out))
    assert (
        f"set aside {n} shard(s) into {out / 'set_aside'} ({n} written by another sweep (its fingerprint differs))"
        in rerun.stdout
    )
    assert "already on disk" not in rerun.stdout
    assert len(list((out / "set_aside").iterdir())) == n  # moved, never deleted
    fresh = tmp_path / "fresh"
    assert run_cli(*one, "-o", "d=5", "--out", fresh).exit_code == 0
    assert_same_numbers(out, fresh)
    assert_every_shard_is_this_sweeps(out)
    assert outside(tmp_path, out, fresh) == before


@pytest.mark.parametrize("damage", ["truncated", "empty"])
def test_a_damaged_shard_reruns_exactly_its_configuration(tmp_path, uninterrupted, damage):
    out = tmp_path / "sweep"
    shutil.copytree(uninterrupted, out)
    victim = random.Random(damage).choice(shard_paths(out))
    data = victim.read_bytes()
    victim.write_bytes(data[: len(data) // 2] if damage == "truncated" else b"")
    before = outside(tmp_path, out)

    rerun = run_cli("sweep", *GRID, "--out", out)
    assert rerun.exit_code == 0, rerun.output
    assert f"resuming: {N_CONFIGURATIONS - 1} of {N_CONFIGURATIONS} configurations are already on disk" in rerun.stdout
    assert "set aside 1 shard(s)" in rerun.stdout and "damaged (it does not read back whole)" in rerun.stdout
    assert [p.name for p in (out / "set_aside").iterdir()] == [victim.name]
    assert_same_numbers(out, uninterrupted)
    assert_every_shard_is_this_sweeps(out)
    assert outside(tmp_path, out) == before


# --- 2: workers die with their parent; a killed --workers 2 sweep resumes to the uninterrupted numbers ---------


def children(pid: int) -> set[int]:
    found = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            found |= {int(c) for c in (task / "children").read_text().split()}
    return found


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow  # ten killed two-worker sweeps, each resumed: minutes on a loaded 2-core machine
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="finds the workers through /proc (Linux)")
def test_killing_the_parent_of_two_workers_at_random_points_loses_nothing(tmp_path, uninterrupted):
    rng = random.Random(11)
    command = ["sweep", *GRID, "--workers", "2"]
    for run in range(10):
        out = tmp_path / f"run{run}"
        process = start(*command, "--out", out)
        delay = rng.uniform(0.5, 8.0)
        deadline = time.monotonic() + delay
        workers: set[int] = set()
        while time.monotonic() < deadline and process.poll() is None:
            workers |= children(process.pid)
            time.sleep(0.05)
        process.send_signal(signal.SIGKILL)
        process.communicate(timeout=60)
        # No worker outlives its parent (each would go on writing shards into a folder another sweep may own).
        give_up = time.monotonic() + 20
        while any(alive(w) for w in workers) and time.monotonic() < give_up:
            time.sleep(0.1)
        assert not any(alive(w) for w in workers), f"run {run}: workers {workers} outlived their parent"

        # Resumed in this process, one configuration after another (a folder started one way can be finished another).
        resumed = run_cli("sweep", *GRID, "--out", out)
        assert resumed.exit_code == 0, f"run {run} (killed after {delay:.2f} s): {resumed.output}"
        assert_same_numbers(out, uninterrupted)
        assert_every_shard_is_this_sweeps(out)
        assert len(shard_paths(out)) == N_CONFIGURATIONS and not (out / "set_aside").exists()


# --- 3: nothing outside --out is touched through links ---------------------------------------------------------


def test_force_does_not_follow_a_linked_shards_folder(tmp_path):
    out, elsewhere = tmp_path / "sweep", tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "precious.parquet").write_bytes(b"not yours to delete")
    one = [
        "sweep",
        "--model",
        "linear",
        "--timesteps",
        "2",
        "--method",
        "euler",
        "--library",
        "native",
        "--dtype",
        "float16",
        "--scaling",
        "none",
        "--no-report",
    ]
    assert run_cli(*one, "--out", out).exit_code == 0
    shutil.rmtree(out / "shards")
    (out / "shards").symlink_to(elsewhere)
    before = snapshot(tmp_path)

    refused = run_cli(*one, "--timesteps", "4", "--force", "--out", out)
    assert refused.exit_code == 2
    assert "is a symbolic link" in one_error_line(refused.stderr)
    assert snapshot(tmp_path) == before


def test_a_temporary_name_linked_outside_is_replaced_not_written_through(tmp_path):
    """A sweep writes results.parquet through `.results.parquet.tmp-<its pid>`; a link planted there must not lead
    out."""
    out, target = tmp_path / "sweep", tmp_path / "target.txt"
    target.write_text("stays as it is")
    out.mkdir()
    (out / f".results.parquet.tmp-{os.getpid()}").symlink_to(target)  # run_cli runs the sweep in this process
    result = run_cli(
        "sweep",
        "--model",
        "linear",
        "--timesteps",
        "2",
        "--method",
        "euler",
        "--library",
        "native",
        "--dtype",
        "float16",
        "--scaling",
        "none",
        "--no-report",
        "--out",
        out,
    )
    assert result.exit_code == 0, result.output
    assert target.read_text() == "stays as it is"
    assert len(results(out)) == 1


# --- 4: an axis value given twice runs once, and the grid says so -----------------------------------------------


def test_repeated_axis_values_run_once_and_check_accepts_the_folder(tmp_path):
    out = tmp_path / "sweep"
    result = run_cli(
        "sweep",
        "--model",
        "linear",
        "--timesteps",
        "2,2",
        "--method",
        "euler,euler",
        "--library",
        "native",
        "--dtype",
        "float16,bfloat16,float16",
        "--scaling",
        "none",
        "--no-report",
        "--out",
        out,
    )
    assert result.exit_code == 0, result.output
    description = json.loads((out / "manifest.json").read_text())["grid"]["description"]
    assert description.endswith(
        "2 (library, dtype, scaling) = 2 configurations (given more than once, run once: n_timesteps 2, "
        "method euler, dtype float16)"
    )
    assert "given more than once, run once: n_timesteps 2, method euler, dtype float16" in " ".join(
        result.stdout.split()
    )
    table = results(out)
    assert table.dtype.tolist() == ["float16", "bfloat16"] and not table.duplicated(list(CONFIG_COLUMNS)).any()
    check = run_cli("check", out, "--baseline", out)
    assert check.exit_code == 0, check.output


# --- 5: one owner per folder ------------------------------------------------------------------------------------


@pytest.mark.slow  # a sweep in a fresh process, killed for real: 5-7 s
def test_a_second_sweep_on_a_busy_folder_is_refused_and_the_lock_dies_with_its_holder(tmp_path):
    out = tmp_path / "sweep"
    longer = ["sweep", *[a if a != "2,4" else "2,4,8,16,32,64" for a in GRID], "--out", out]  # 42 configurations
    first = start(*longer)
    while not shard_paths(out):
        assert first.poll() is None, first.communicate()
        time.sleep(0.02)
    second = run_cli(*longer)
    assert second.exit_code == 2
    line = one_error_line(second.stderr)
    assert f"output folder '{out}' is in use by another sweep (process {first.pid} on " in line

    first.send_signal(signal.SIGKILL)  # the lock goes with its process: no stale lock to clear by hand
    first.communicate(timeout=60)
    resumed = run_cli(*longer)
    assert resumed.exit_code == 0, resumed.output
    table = results(out)
    assert len(table) == 42 and not table.duplicated(list(CONFIG_COLUMNS)).any()
    assert_every_shard_is_this_sweeps(out)


def test_a_finished_sweep_leaves_no_lock_file_and_a_lock_is_taken_again_after_release(tmp_path):
    from roundoff_analyzer.storage.folder_lock import LOCK, FolderBusy, FolderLock

    out = tmp_path / "sweep"
    assert run_cli("sweep", *GRID, "--out", out).exit_code == 0
    assert not (out / LOCK).exists() and not (out / LOCK).is_symlink()
    first, second = FolderLock(tmp_path), FolderLock(tmp_path)
    first.acquire()
    with pytest.raises(FolderBusy, match=f"process {os.getpid()} on "):
        second.acquire()
    first.release()
    assert not (tmp_path / LOCK).exists()
    second.acquire()  # on a new lock file, which a third process sees as held
    with pytest.raises(FolderBusy):
        FolderLock(tmp_path).acquire()
    second.release()


# --- 6: --where is a filter language, not code -------------------------------------------------------------------


@pytest.mark.parametrize(
    "where, expected",
    [
        ("dtype == 'float16' and status != 'skipped'", lambda t: (t.dtype == "float16") & (t.status != "skipped")),
        (
            "n_timesteps >= 4 and not (library in ['native'] or scaling == \"dynamic\")",
            lambda t: (t.n_timesteps >= 4) & ~(t.library.isin(["native"]) | (t.scaling == "dynamic")),
        ),
        ("2 < n_timesteps <= 4", lambda t: (t.n_timesteps > 2) & (t.n_timesteps <= 4)),
        (
            "scaling not in ('grad', 'dynamic') or grad_params_rel_err_over_u > 0.5",
            lambda t: ~t.scaling.isin(["grad", "dynamic"]) | (t.grad_params_rel_err_over_u > 0.5),
        ),
        ("failure_class == none", lambda t: t.failure_class.isna()),
    ],
)
def test_where_filters_rows_like_the_same_condition_in_pandas(uninterrupted, where, expected):
    table = results(uninterrupted)
    shown = run_cli("show", uninterrupted, "--where", where)
    assert shown.exit_code == 0, shown.output
    # the title may wrap
    assert f"{expected(table).sum()} of {len(table)} configurations" in " ".join(shown.stdout.split())


@pytest.mark.parametrize(
    "where, phrase",
    [
        ("@pd.io.common.os.system('touch {marker}')==0", "is not a filter"),
        ("__import__('os').system('touch {marker}') == 0", "a call is not"),
        ("dtype.__class__.__mro__ == 1", "an attribute is not"),
        ("n_timesteps + 1 > 2", "arithmetic is not"),
        ("no_such_column == 1", "no column 'no_such_column'"),
        ("dtype in 'float16'", "'in' takes a bracketed list"),
        ("n_timesteps > 'four'", "compares values of different kinds"),
        ("(" * 3000, "at most 2000"),
    ],
)
def test_where_outside_the_language_is_one_line_and_runs_nothing(tmp_path, uninterrupted, where, phrase):
    marker = tmp_path / "MARKER"
    before = snapshot(tmp_path)
    refused = run_cli("show", uninterrupted, "--where", where.format(marker=marker))
    assert refused.exit_code == 2
    assert phrase in one_error_line(refused.stderr)
    assert not marker.exists() and snapshot(tmp_path) == before


# --- 7 is in tests/test_inputs.py::BAD_INPUTS (os:system, re-exported built-ins, imported functions) -----------


# --- 9, 12: the machine's failures are one line, with how much is done and how to go on ------------------------


def _can_mount() -> bool:
    if not shutil.which("unshare"):
        return False
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"], capture_output=True)
    return probe.returncode == 0


needs_mounts = pytest.mark.skipif(
    not _can_mount(), reason="needs `unshare -rm` to mount a small or read-only file system"
)


@needs_mounts
def test_a_full_disk_stops_the_sweep_with_one_line_saying_how_far_it_got(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    sweep = " ".join([sys.executable, "-m", "roundoff_cli", "sweep", *GRID, "--out", f"{disk}/out"])
    script = (
        f"mount -t tmpfs -o size=96k tmpfs {disk} && {sweep}; echo rc=$?; ls {disk}/out/shards | grep -c "
        f"parquet; ls -a {disk}/out {disk}/out/shards"
    )
    done = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, timeout=600)
    line = one_error_line(done.stderr)
    n_shards = int(done.stdout.split("rc=")[1].splitlines()[1])
    assert "rc=1" in done.stdout, done.stdout
    assert "no space left on the device" in line
    assert f"{n_shards} of {N_CONFIGURATIONS} configurations are done and saved in {disk}/out" in line
    assert "run the same command again" in line
    assert ".tmp-" not in done.stdout  # a write that failed removed its temporary file
    assert os.listdir(disk) == []  # the file system was the namespace's own


@needs_mounts
def test_a_read_only_out_is_one_line_and_leaves_nothing(tmp_path):
    readonly = tmp_path / "readonly"
    readonly.mkdir()
    before = snapshot(tmp_path)
    sweep = " ".join([sys.executable, "-m", "roundoff_cli", "sweep", *GRID, "--out", f"{readonly}/out"])
    done = subprocess.run(
        [
            "unshare",
            "-rm",
            "sh",
            "-c",
            f"mount --bind -o ro {readonly} {readonly} && mount -o remount,ro,bind {readonly} && {sweep}",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 2, done.stderr
    assert "the file system is read-only" in one_error_line(done.stderr)
    assert snapshot(tmp_path) == before


def test_a_timeout_at_any_boundary_is_a_timeout_row_and_leaves_torch_as_it_was(tmp_path):
    for attempt in range(3):  # the alarm lands somewhere else each time
        out = tmp_path / f"sweep{attempt}"
        result = run_cli("sweep", *GRID, "--timeout", "0.001", "--out", out)
        assert result.exit_code == 0, result.output
        table = results(out)
        ran = table[table.status != "skipped"]
        assert set(ran.status) <= {"ok", "failed"} and set(ran.failure_class.dropna()) <= {"timeout"}
        # An alarm inside torch.autocast.__enter__ once left autocast on for every later run in the process.
        assert not torch.is_autocast_enabled("cpu") and torch.is_grad_enabled()
        assert autocast_nesting() == 0  # else autocast's cache of casts would never be cleared again in this process


def test_a_baseline_with_n_timesteps_as_text_is_one_line(tmp_path, uninterrupted):
    baseline = tmp_path / "baseline.parquet"
    table = results(uninterrupted)
    table.assign(n_timesteps=table.n_timesteps.astype(str)).to_parquet(baseline)
    refused = run_cli("check", uninterrupted, "--baseline", baseline)
    assert refused.exit_code == 2
    line = one_error_line(refused.stderr)
    assert "column n_timesteps holds" in line and "values, not numbers" in line


def test_misleading_timesteps_that_can_never_fit_are_an_oom_row_that_never_ran(tmp_path):
    out = tmp_path / "sweep"
    result = run_cli(
        "sweep",
        "--model",
        "linear",
        "--timesteps",
        "1000000000000",
        "--method",
        "euler",
        "--library",
        "native",
        "--dtype",
        "float16",
        "--scaling",
        "none",
        "--no-report",
        "--allow-oom",
        "--out",
        out,
    )
    assert result.exit_code == 0, result.output
    row = results(out).iloc[0]
    assert (row.status, row.failure_class) == ("failed", "oom")
    assert (
        "the float64 reference trajectory and the run's own alone need" in row.failure_message
        and "not run" in row.failure_message
    )


# --- 10: a sweep whose every configuration is skipped -------------------------------------------------------------


def test_a_sweep_of_skipped_configurations_finishes(tmp_path):
    out = tmp_path / "sweep"
    result = run_cli(
        "sweep",
        "--model",
        "linear",
        "--timesteps",
        "2",
        "--library",
        "torchdiffeq",
        "--scaling",
        "dynamic",
        "--no-report",
        "--out",
        out,
    )
    assert result.exit_code == 0, result.output
    assert (results(out).status == "skipped").all()
    assert run_cli("show", out).exit_code == 0
    assert run_cli("check", out, "--baseline", out).exit_code == 0


# The report of such a sweep:
# tests/test_report.py::test_all_failed_all_skipped_and_single_configuration_sweeps_each_give_a_report


# --- 11: manifests that are not what a sweep writes ---------------------------------------------------------------


@pytest.mark.slow  # three fresh processes per manifest, each importing torch: 10 s each
@pytest.mark.parametrize("manifest, outcome", [("[]", 0), ('{"fingerprint": 5}', 2), ("\x00\xff not json", 0)])
def test_a_broken_manifest_is_resumed_from_the_shards_or_refused_in_one_line(
    tmp_path, uninterrupted, manifest, outcome
):
    out = tmp_path / "sweep"
    shutil.copytree(uninterrupted, out)
    (out / "manifest.json").write_bytes(manifest.encode("latin-1"))
    result = cli("sweep", *GRID, "--out", out)
    assert result.returncode == outcome and "Traceback" not in result.stderr, result.stderr
    if outcome == 2:  # a JSON manifest that does not say it is a sweep's may be another tool's: the user's file
        assert "holds files roundoff did not write (manifest.json, timing.parquet)" in one_error_line(result.stderr)
    else:  # no manifest to go by: the shards carry the fingerprint, so all of them are this sweep's
        assert f"resuming: {N_CONFIGURATIONS} of {N_CONFIGURATIONS}" in result.stdout
        assert_same_numbers(out, uninterrupted)
    for command in (["show", out], ["check", out, "--baseline", uninterrupted, "--allow-different-setup"]):
        read = cli(*command)
        assert read.returncode in (0, 2) and "Traceback" not in read.stderr, read.stderr


# A finished sweep with its report: report.md and figures/ are names a user's own folder may hold too.
REPORTED_GRID = ["--model", "linear", "--timesteps", "2", "--method", "euler", "--device", "cpu"]


@pytest.fixture(scope="module")
def reported(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("reported") / "sweep"
    assert run_cli("sweep", *REPORTED_GRID, "--out", out).exit_code == 0
    assert {"report.md", "figures", "shards", "results.parquet"} <= {p.name for p in out.iterdir()}
    return out


def damage_manifest(out: Path, damage: str) -> str:
    """Damage the folder's manifest.json; returns what the sweep should call the damage."""
    manifest = out / "manifest.json"
    data = manifest.read_bytes()
    if damage == "random bytes":
        manifest.write_bytes(b"\xff" + random.Random(49).randbytes(len(data) - 1))  # 0xff begins no UTF-8 character
        return "not UTF-8 text"
    manifest.write_bytes(data[: len(data) // 3])
    return "not JSON"


@pytest.mark.parametrize("damage", ["random bytes", "cut to a third"])
def test_a_reported_sweep_with_a_damaged_manifest_resumes_to_the_uninterrupted_numbers(tmp_path, reported, damage):
    out = tmp_path / "sweep"
    shutil.copytree(reported, out)
    reason = damage_manifest(out, damage)
    before = outside(tmp_path, out)

    rerun = run_cli("sweep", *REPORTED_GRID, "--out", out)
    assert rerun.exit_code == 0, rerun.output
    assert f"manifest.json was damaged ({reason}): written again from this command" in rerun.stdout
    n = len(results(reported))
    assert f"resuming: {n} of {n} configurations are already on disk" in rerun.stdout
    assert not (out / "set_aside").exists()
    assert_same_numbers(out, reported)
    rebuilt, written = (json.loads((folder / "manifest.json").read_text()) for folder in (out, reported))
    assert rebuilt["fingerprint"] == written["fingerprint"]
    assert_every_shard_is_this_sweeps(out)
    assert outside(tmp_path, out) == before


@pytest.mark.parametrize("damage", ["random bytes", "cut to a third"])
def test_a_damaged_manifest_no_shard_vouches_for_is_refused_naming_it(tmp_path, reported, damage):
    # The report and figures with a damaged manifest, and shards whose recorded hashes no longer match: nothing shows
    # the folder is a sweep's, and the refusal says why rather than calling the files the user's.
    out = tmp_path / "sweep"
    shutil.copytree(reported, out)
    reason = damage_manifest(out, damage)
    for recorded in (out / "shards").glob("*.sha256"):
        recorded.write_text("0" * 64)
    before = snapshot(tmp_path)

    refused = run_cli("sweep", *REPORTED_GRID, "--out", out)
    assert refused.exit_code == 2
    line = one_error_line(refused.stderr)
    assert (
        f"output folder '{out}' has a damaged manifest.json ({reason}) and no shard whose bytes match their recorded "
        "content hash, so nothing shows that its files (figures/, report.md, timing.parquet) are roundoff's" in line
    )
    assert "use another --out" in line
    assert snapshot(tmp_path) == before


@pytest.mark.slow  # three fresh processes, each importing torch: 15-25 s
def test_a_non_numeric_duration_is_one_line_where_the_manifest_is_read(tmp_path, uninterrupted):
    # A manifest value of the wrong kind is one line naming the key; `show` reads no manifest, and a resume
    # rewrites it (the shards' fingerprints say what they are).
    out = tmp_path / "sweep"
    shutil.copytree(uninterrupted, out)
    manifest = json.loads((out / "manifest.json").read_text())
    (out / "manifest.json").write_text(json.dumps({**manifest, "duration_s": "a while"}))
    refused = cli("check", out, "--baseline", uninterrupted)
    assert refused.returncode == 2 and "key duration_s must be a number (got 'a while')" in one_error_line(
        refused.stderr
    )
    for command in (["show", out], ["sweep", *GRID, "--out", out]):
        read = cli(*command)
        assert read.returncode == 0 and "Traceback" not in read.stderr, read.stderr


# --- misleading output --------------------------------------------------------------------------------------------


@pytest.mark.slow  # two fresh processes, each importing torch: 10 s
def test_escape_codes_in_stored_text_never_reach_the_terminal(tmp_path, uninterrupted):
    out = tmp_path / "sweep"
    shutil.copytree(uninterrupted, out)
    table = pq.read_table(out / "results.parquet").to_pandas()
    table.loc[0, ["status", "failure_class", "failure_message"]] = [
        "failed",
        "error\x1b[2J",
        "boom\x1b]0;owned\x07\x9b31m\nsecond line",
    ]
    pq.write_table(pa.Table.from_pandas(table, preserve_index=False), out / "results.parquet")
    for command, shown_text in ((["show", out], "boom"), (["check", out, "--baseline", uninterrupted], "(error")):
        shown = cli(*command)
        text = shown.stdout + shown.stderr
        assert shown.returncode in (0, 1) and shown_text in text, text
        assert not any(ch in text for ch in "\x1b\x07\x9b"), repr(text)


@pytest.mark.slow  # a real SIGTERM to a sweep in a fresh process: 5-8 s
def test_sigterm_stops_at_once_and_rebuilds_the_results(tmp_path):
    out = tmp_path / "sweep"
    process = start("sweep", *GRID, "--out", out)
    while not shard_paths(out):
        assert process.poll() is None, process.communicate()
        time.sleep(0.02)
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 143, stdout + stderr  # 128 + SIGTERM: the configuration in progress abandoned
    n_done = len(shard_paths(out))
    assert f"interrupted: {n_done} of {N_CONFIGURATIONS} configurations are done and saved in {out}" in stderr
    assert len(results(out)) == n_done


def test_temporary_files_of_dead_processes_are_removed(tmp_path, uninterrupted):
    out = tmp_path / "sweep"
    shutil.copytree(uninterrupted, out)
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    ).stdout.strip()
    (out / f".results.parquet.tmp-{dead}").write_bytes(b"half a table")
    assert run_cli("sweep", *GRID, "--out", out).exit_code == 0
    assert not list(out.glob(".*.tmp-*"))


def test_check_refuses_another_setup_naming_what_differs(tmp_path, uninterrupted):
    other = tmp_path / "other"
    assert run_cli("sweep", *GRID, "-o", "d=3", "--out", other).exit_code == 0
    refused = run_cli("check", other, "--baseline", uninterrupted)
    assert refused.exit_code == 2
    assert "were run on different setups (model options: d 3 vs 4)" in one_error_line(refused.stderr)
    allowed = run_cli("check", other, "--baseline", uninterrupted, "--allow-different-setup")
    assert (
        allowed.exit_code in (0, 1)
        and "setups differ (compared anyway, --allow-different-setup): model options: d 3 vs 4" in allowed.stdout
    )


def test_check_names_the_configurations_only_one_side_has_before_the_table(tmp_path, uninterrupted):
    smaller = tmp_path / "smaller"
    assert run_cli("sweep", *[a if a != "2,4" else "2,8" for a in GRID], "--out", smaller).exit_code == 0
    checked = run_cli("check", smaller, "--baseline", uninterrupted)
    lines = checked.stdout.splitlines()
    new_only = next(i for i, line in enumerate(lines) if line.startswith("only in the new results (7): "))
    baseline_only = next(i for i, line in enumerate(lines) if line.startswith("only in the baseline (7): "))
    assert "n=8" in lines[new_only] and "n=4" in lines[baseline_only]
    assert max(new_only, baseline_only) < next(
        i for i, line in enumerate(lines) if "roundoff check: what changed" in line
    )


def test_report_refuses_a_figures_link_out_of_the_folder(tmp_path, uninterrupted):
    out, elsewhere = tmp_path / "sweep", tmp_path / "elsewhere"
    shutil.copytree(uninterrupted, out)
    elsewhere.mkdir()
    (out / "figures").symlink_to(elsewhere)
    before = snapshot(tmp_path)
    refused = run_cli("report", out)
    assert refused.exit_code == 2 and "is a symbolic link" in one_error_line(refused.stderr)
    assert snapshot(tmp_path) == before


# The report reads the manifest's values (duration, repeats, time limit) as numbers: a value of another kind is one line
# naming the key, and nothing is written.
@pytest.mark.slow  # a fresh process per manifest, each importing torch and matplotlib: 6-13 s each
@pytest.mark.parametrize(
    "manifest, key", [('{"duration_s": "a while"}', "duration_s"), ('{"repeats": "x", "timeout_s": "y"}', "repeats")]
)
def test_the_report_refuses_a_manifest_with_values_of_the_wrong_kind_in_one_line(
    tmp_path, uninterrupted, manifest, key
):
    out = tmp_path / "sweep"
    shutil.copytree(uninterrupted, out)
    (out / "manifest.json").write_text(manifest)
    before = snapshot(tmp_path)
    report = cli("report", out)
    assert report.returncode == 2 and f"key {key} must be" in one_error_line(report.stderr)
    assert snapshot(tmp_path) == before
