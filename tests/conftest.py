"""Shared fixtures: real (small) sweeps run once per test session through the real CLI."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pandas as pd
import pytest
from roundoff_cli.app import app
from typer.testing import CliRunner

# A small OT-Flow problem: a few hundred parameters, fast enough for float16 on a CPU.
TINY_OTFLOW = ["-o", "d=3", "-o", "hidden=8", "-o", "batch=16"]
# Loss weights large enough that float16 gradients overflow without scaling: OT-Flow's default alpha = (1, 2000, 800)
# with the last two times 100.
OVERFLOWING_OTFLOW = [*TINY_OTFLOW, "-o", "alpha=1,2e5,8e4"]


def pytest_collection_modifyitems(config, items):
    """Tests marked `cuda` run on a CUDA device or not at all: skipped, with the reason, where torch sees none."""
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device: torch.cuda.is_available() is False here")
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(skip)


# A width for tests that read the cells of a table: no cell of the tables they read wraps at it, whatever the
# terminal's.
WIDE_TABLES = 400


def as_written_before_content_hashes(folder: Path) -> None:
    """Make a sweep folder look as a version before content hashes left it: no hash beside its shards, none announced
    in its manifest (so that a test rewriting its shards as an older version wrote them sees them reused)."""
    for recorded in (folder / "shards").glob("*.sha256"):
        recorded.unlink()
    manifest = json.loads((folder / "manifest.json").read_text())
    del manifest["shard_hashes"]
    (folder / "manifest.json").write_text(json.dumps(manifest))


def run_cli(*args: str, columns: int | None = None):
    """Run `roundoff ARGS` in-process; returns click's Result (exit_code, stdout, stderr, output).

    `columns`: the width its tables are drawn at ($COLUMNS); without it, the terminal's, or the piped default.
    """
    env = {"COLUMNS": str(columns)} if columns else None
    return CliRunner().invoke(app, [str(a) for a in args], env=env, catch_exceptions=False)


@pytest.fixture(scope="session")
def tiny_sweep(tmp_path_factory) -> Path:
    """The default grid (its seven (library, dtype, scaling) triples) on a tiny otflow, n_timesteps 4 and 16."""
    out = tmp_path_factory.mktemp("tiny") / "sweep"
    result = run_cli("sweep", "--model", "otflow", *TINY_OTFLOW, "--timesteps", "4,16", "--out", out)
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="session")
def overflow_sweep(tmp_path_factory) -> Path:
    """float16 with every scaling and both libraries on an otflow whose gradients overflow float16.

    The libraries are named: the other installed ones would add rows that no test reads, and seconds."""
    out = tmp_path_factory.mktemp("overflow") / "sweep"
    result = run_cli(
        "sweep",
        "--model",
        "otflow",
        *OVERFLOWING_OTFLOW,
        "--timesteps",
        "4,16",
        "--method",
        "euler",
        "--library",
        "torchdiffeq,native",
        "--dtype",
        "float16",
        "--scaling",
        "none,grad,dynamic",
        "--out",
        out,
    )
    assert result.exit_code == 0, result.output
    return out


def results(folder: Path) -> pd.DataFrame:
    return pd.read_parquet(folder / "results.parquet")


def snapshot(folder: Path) -> dict[str, bytes | None]:
    """Every path under `folder` with the bytes of its files (None for folders): equal snapshots, nothing changed."""
    return {
        str(p.relative_to(folder)): (p.read_bytes() if p.is_file() and not p.is_symlink() else None)
        for p in sorted(folder.rglob("*"))
    }


def needs(package: str) -> pytest.MarkDecorator:
    """Skip, with its reason, a test of an optional solver library's package that is not installed."""
    absent = importlib.util.find_spec(package) is None
    return pytest.mark.skipif(absent, reason=f"{package} is not installed: an optional solver library")
