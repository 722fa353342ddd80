"""Peak memory on the CPU, from the allocator's profiler events: in a block, and in a sweep's rows."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import torch

from roundoff_analyzer.measuring.cpu_memory import cpu_peak_memory
from tests.conftest import TINY_OTFLOW, results, run_cli


def test_peak_is_the_most_held_at_once_beyond_what_was_held_before():
    kept = torch.ones(250_000)  # allocated before the block: not part of its peak
    with cpu_peak_memory() as peak:
        first = torch.ones(1_000_000)  # 4 MB
        second = first * 2  # 8 MB held at once
        del first, second
        third = torch.ones(500_000)  # 2 MB, after the 8 MB were freed
    assert 8_000_000 <= peak.bytes < 8_100_000, peak.bytes
    del kept, third


def test_a_sweep_with_cpu_memory_fills_peak_memory(tmp_path):
    out = tmp_path / "sweep"
    result = run_cli(
        "sweep",
        "--model",
        "otflow",
        *TINY_OTFLOW,
        "--timesteps",
        "4,16",
        "--method",
        "euler",
        "--library",
        "native",
        "--dtype",
        "float16,float32",
        "--scaling",
        "none",
        "--device",
        "cpu",
        "--cpu-memory",
        "--no-report",
        "--out",
        out,
    )
    assert result.exit_code == 0, result.output
    table = results(out).set_index(["dtype", "n_timesteps"])
    assert (table.peak_memory_bytes > 0).all(), table.peak_memory_bytes
    # More steps hold more stored states.
    assert table.loc[("float32", 16), "peak_memory_bytes"] > table.loc[("float32", 4), "peak_memory_bytes"]


def test_the_profiler_says_nothing_on_stderr():
    """kineto prints `USDT:... profiler_start` at every profile unless told otherwise: none of it reaches the
    terminal."""
    script = (
        "import torch\nfrom roundoff_analyzer.measuring.cpu_memory import cpu_peak_memory\nwith "
        "cpu_peak_memory() as peak:\n    torch.ones(1000)\nprint(peak.bytes)"
    )
    env = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"}
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120
    )
    assert out.returncode == 0 and int(out.stdout) > 0, out.stderr
    # kineto's lines: `USDT:<time> <pid> <File>.cpp:<line>] ...`
    assert not re.search(r"\.cpp:\d+\]", out.stderr), out.stderr
