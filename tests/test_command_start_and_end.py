"""How the `roundoff` command starts and ends: a sweep that may run in worker processes starts their fork server
before it imports torch itself, and the command ends with its exit status without the interpreter's teardown, yet
with its output flushed and the atexit handlers run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from roundoff_analyzer.planning.workers import may_use_processes

# Runs the sweep command in a fresh interpreter, once per argument list, and prints after each the list of the times
# the command started the workers' fork server so far, each as whether torch had been imported by then.
EARLY_START = """
import sys
from roundoff_analyzer.commands import sweep
started = sweep.warm_up_workers
seen = []
def recording():
    seen.append("torch" in sys.modules)
    started()
sweep.warm_up_workers = recording
from typer.testing import CliRunner
from roundoff_cli.app import app
for args in {runs!r}:
    result = CliRunner().invoke(app, args)
    print("exit", result.exit_code, "warm-ups", seen)
"""

TINY_GRID = ["sweep", "--model", "linear", "--timesteps", "2,4", "--method", "euler", "--device", "cpu", "--no-report"]


@pytest.mark.skipif(os.cpu_count() == 1, reason="needs two cores for two workers")
def test_a_sweep_with_workers_starts_their_fork_server_before_it_imports_torch_and_one_without_starts_none(tmp_path):
    runs = [
        [*TINY_GRID, "--workers", "2", "--out", str(tmp_path / "two")],
        # Refused in planning, after the point where a fork server would have been started.
        [*TINY_GRID, "--workers", "1", "-o", "nosuch=1", "--out", str(tmp_path / "one")],
        [*TINY_GRID, "--executor", "local", "-o", "nosuch=1", "--out", str(tmp_path / "local")],
    ]
    out = subprocess.run(
        [sys.executable, "-c", EARLY_START.format(runs=runs)],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=300,
    )
    assert out.stdout.splitlines() == [
        "exit 0 warm-ups [False]",
        "exit 2 warm-ups [False]",
        "exit 2 warm-ups [False]",
    ], out.stdout + out.stderr


def test_whether_a_sweep_may_use_processes_is_judged_from_its_settings():
    assert may_use_processes({"workers": 2}) and may_use_processes({"executor": "processes", "workers": 3})
    assert not may_use_processes({"workers": 1}) and not may_use_processes({"executor": "local"})
    assert not may_use_processes({"executor": "slurm"}) and not may_use_processes({"device": "cuda"})
    assert not may_use_processes({"workers": "2"})  # not validated yet: what is not a number starts nothing


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="pins this process to one core (Linux)")
def test_on_one_core_a_sweep_left_to_choose_its_workers_starts_none():
    cores = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cores)})
    try:
        assert not may_use_processes({})
    finally:
        os.sched_setaffinity(0, cores)
    if len(cores) > 1:
        assert may_use_processes({}) and may_use_processes({"device": "cpu"})


ENDING = """
import atexit
from roundoff_cli.process_exit import exit_without_teardown
atexit.register(lambda: print("atexit ran", end=""))
print("buffered ", end="")
exit_without_teardown({code!r})
"""


@pytest.mark.parametrize(("code", "status", "stderr"), [(None, 0, ""), (3, 3, ""), ("stopped: why", 1, "stopped: why")])
def test_the_command_ends_with_its_status_its_output_flushed_and_atexit_run(code, status, stderr):
    out = subprocess.run(
        [sys.executable, "-c", ENDING.format(code=code)], capture_output=True, text=True, stdin=subprocess.DEVNULL
    )
    assert (out.returncode, out.stdout, out.stderr.strip()) == (status, "buffered atexit ran", stderr)


def test_the_installed_command_keeps_its_exit_status_and_its_lines(tmp_path):
    """`python -m roundoff_cli` runs the entry point itself (the tests' CliRunner does not)."""

    def command(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "roundoff_cli", *args],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            cwd=tmp_path,
            timeout=300,
        )

    version = command("--version")
    assert version.returncode == 0 and version.stdout.startswith("roundoff-analyzer ")
    refused = command("sweep", "--model", "nope")
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.strip().startswith("error: unknown model 'nope'") and len(refused.stderr.splitlines()) == 1
    ran = command(*TINY_GRID, "--workers", "1", "--out", "done")
    assert ran.returncode == 0, ran.stderr
    assert "configurations (" in ran.stdout and (Path(tmp_path) / "done" / "results.parquet").is_file()
