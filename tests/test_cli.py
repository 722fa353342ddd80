"""Command-line conventions: --version, shell completion, a grouped --help that shows every default."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import roundoff_analyzer

from .conftest import run_cli


def test_version():
    result = run_cli("--version")
    assert result.exit_code == 0 and result.stdout.strip() == f"roundoff-analyzer {roundoff_analyzer.__version__}"


def test_shell_completion_completes_commands_and_options():
    """What the script `roundoff --install-completion` installs asks: the command with the words typed so far."""
    roundoff = Path(sys.executable).parent / "roundoff"
    for typed, expected in (("roundoff sw", "sweep"), ("roundoff sweep --thr", "--threads")):
        env = {**os.environ, "_ROUNDOFF_COMPLETE": "complete_bash", "COMP_WORDS": typed, "COMP_CWORD": str(len(typed.split()) - 1)}
        out = subprocess.run([roundoff], env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)
        assert out.returncode == 0 and out.stdout.split() == [expected], out.stderr


def test_sweep_help_groups_the_options_and_shows_the_defaults(monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    text = run_cli("sweep", "--help").stdout
    panels = [title for title in ("Model and data", "Grid", "Scaling", "Execution", "Output") if f"─ {title} ─" in text]
    assert panels == ["Model and data", "Grid", "Scaling", "Execution", "Output"]
    flat = " ".join(text.split())
    for default in ("[default: (8,32,128)]", "[default: (euler,rk4)]", "[default: (65536)]", "[default: (0.5)]", "[default: (30)]"):
        assert default in flat
    assert "seven (library, dtype, scaling) triples of the default grid" in flat and "seed 000" not in flat
    force = next(line for line in text.splitlines() if "--force" in line)
    assert "<bool>" not in force  # a flag takes no value


def test_help_lists_each_axis_from_its_registry_and_flags_take_no_value(monkeypatch):
    from roundoff_analyzer.dtypes import DTYPES
    from roundoff_analyzer.libraries import LIBRARIES
    from roundoff_analyzer.methods import METHODS
    from roundoff_analyzer.modes import MODES
    from roundoff_analyzer.scalings import SCALINGS

    monkeypatch.setenv("COLUMNS", "400")  # one line per option: nothing wraps
    text = run_cli("sweep", "--help").stdout
    for option, registry in (("--method", METHODS), ("--dtype", DTYPES), ("--scaling", SCALINGS), ("--mode", MODES), ("--library", LIBRARIES)):
        line = next(line for line in text.splitlines() if line.lstrip("│ ").startswith(f"{option} "))
        assert ", ".join(registry.allowed()) in line, line
    assert "autocast-nocache" in text and "dopri5" in text
    assert "<bool>" not in text and "…" not in text  # flags take no value; no help is cut
    assert "bsds300:PATH with an optional ?split=train" in text
    assert "<bool>" not in run_cli("--help").stdout
