"""Command-line conventions: --version, shell completion, a grouped --help that shows every default."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import roundoff_analyzer

from .conftest import run_cli


@pytest.mark.unit
def test_version():
    result = run_cli("--version")
    assert result.exit_code == 0 and result.stdout.strip() == f"roundoff-analyzer {roundoff_analyzer.__version__}"


@pytest.mark.unit
def test_shell_completion_completes_commands_and_options():
    """What the script `roundoff --install-completion` installs asks: the command with the words typed so far."""
    roundoff = Path(sys.executable).parent / "roundoff"
    for typed, expected in (("roundoff sw", "sweep"), ("roundoff sweep --thr", "--threads")):
        env = {
            **os.environ,
            "_ROUNDOFF_COMPLETE": "complete_bash",
            "COMP_WORDS": typed,
            "COMP_CWORD": str(len(typed.split()) - 1),
        }
        out = subprocess.run([roundoff], env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)
        assert out.returncode == 0 and out.stdout.split() == [expected], out.stderr


@pytest.mark.unit
def test_sweep_help_groups_the_options_and_shows_the_defaults(monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    text = run_cli("sweep", "--help").stdout
    panels = [title for title in ("Model and data", "Grid", "Scaling", "Execution", "Output") if f"─ {title} ─" in text]
    assert panels == ["Model and data", "Grid", "Scaling", "Execution", "Output"]
    flat = " ".join(text.split())
    for default in (
        "[default: (8,32,128)]",
        "[default: (euler,rk4)]",
        "[default: (65536)]",
        "[default: (0.5)]",
        "[default: (30)]",
    ):
        assert default in flat
    assert "seven (library, dtype, scaling) triples of the default grid" in flat and "seed 000" not in flat
    force = next(line for line in text.splitlines() if "--force" in line)
    assert "<bool>" not in force  # a flag takes no value


@pytest.mark.unit
def test_help_lists_each_axis_from_its_registry_and_flags_take_no_value(monkeypatch):
    from roundoff_analyzer.axes.dtypes import DTYPES
    from roundoff_analyzer.axes.libraries import LIBRARIES
    from roundoff_analyzer.axes.methods import METHODS
    from roundoff_analyzer.axes.modes import MODES
    from roundoff_analyzer.axes.scalings import SCALINGS
    from roundoff_analyzer.execution.executors import EXECUTORS

    monkeypatch.setenv("COLUMNS", "400")  # one line per option: nothing wraps
    text = run_cli("sweep", "--help").stdout
    for option, registry in (
        ("--method", METHODS),
        ("--dtype", DTYPES),
        ("--scaling", SCALINGS),
        ("--mode", MODES),
        ("--library", LIBRARIES),
        ("--executor", EXECUTORS),
    ):
        line = next(line for line in text.splitlines() if line.lstrip("│ ").startswith(f"{option} "))
        assert all(name in line for name in registry.allowed()), line  # help names them without importing the registry
    assert "autocast-nocache" in text and "dopri5" in text
    assert "<bool>" not in text and "…" not in text  # flags take no value; no help is cut
    assert "bsds300:PATH with an optional ?split=train" in text
    assert "<bool>" not in run_cli("--help").stdout


@pytest.mark.unit
def test_train_help_names_every_update_rule_without_importing_its_registry(monkeypatch):
    from roundoff_analyzer.training.updates import UPDATES

    monkeypatch.setenv("COLUMNS", "400")
    line = next(line for line in run_cli("train", "--help").stdout.splitlines() if "--update " in line)
    assert all(name in line for name in UPDATES.allowed()), line


HEAVY = ("torch", "pandas", "matplotlib", "pyarrow")


def imported_heavy(script: str) -> list[str]:
    """The heavy libraries that `script`, run in a fresh interpreter, left in sys.modules."""
    probe = f"{script}\nimport sys\nprint('loaded:', *(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120
    )
    assert "loaded:" in out.stdout, out.stderr
    return out.stdout.rpartition("loaded:")[2].split()


def test_the_cli_starts_without_torch_pandas_or_matplotlib():
    """`roundoff --version` and `--help` start at once: the commands import the heavy libraries when they run."""
    assert imported_heavy("import roundoff_cli.app") == []
    for args in (["--version"], ["--help"], ["sweep", "--help"], ["train", "--help"], ["check", "--help"]):
        assert (
            imported_heavy(f"from roundoff_cli.app import app\ntry:\n    app({args!r})\nexcept SystemExit:\n    pass")
            == []
        ), args


@pytest.mark.unit
def test_bad_lists_are_refused_before_torch_is_imported():
    script = (
        "from roundoff_cli.app import app\ntry:\n    app({!r})\nexcept SystemExit as exit:\n    print('exit', "
        "exit.code)"
    )
    for args in (["sweep", "-m", "otflow", "--timesteps", "8,x"], ["train", "-m", "cnf", "--save-at", "0,,5"]):
        probe = f"{script.format(args)}\nimport sys\nprint('torch' in sys.modules)"
        out = subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120
        )
        assert out.stdout.split() == ["exit", "2", "False"], (args, out.stdout, out.stderr)
        assert out.stderr.startswith("error: --"), out.stderr


def test_a_users_names_are_printed_literally_with_no_emoji_and_no_markup(tmp_path, monkeypatch):
    # rich reads `:factory:` as an emoji code and `[red]` as markup; in a user's model, folder or file name both are
    # text, in error lines, headers, table titles and the paths a command says it wrote.
    refused = run_cli("sweep", "--model", "a:factory:b")
    assert refused.exit_code == 2 and "model 'a:factory:b': cannot import a:factory" in refused.stderr, refused.stderr
    folder = tmp_path / "[red]m"
    folder.mkdir()
    (folder / "field.py").write_text(
        "import torch\n"
        "class Field(torch.nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.linear = torch.nn.Linear(2, 2)\n"
        "    def forward(self, t, y):\n        return torch.tanh(self.linear(y))\n"
        "def factory(batch: int = 4):\n"
        "    return Field(), torch.ones(batch, 2), lambda trajectory: trajectory[-1].sum()\n"
        "def failing(batch: int = 4):\n    raise ValueError('[bold]no:factory:here')\n"
    )
    monkeypatch.chdir(tmp_path)
    failed = run_cli("sweep", "--model", "[red]m/field.py:failing")
    assert failed.exit_code == 2
    assert (
        "model [red]m/field.py:failing: the factory raised" in failed.stderr
        and "[bold]no:factory:here" in failed.stderr
    ), failed.stderr
    grid = ["--timesteps", "4", "--method", "rk4", "--library", "native", "--dtype", "float16", "--scaling", "none"]
    out = "out[red]:factory:"
    swept = run_cli("sweep", "--model", "[red]m/field.py:factory", *grid, "--out", out, columns=200)
    assert swept.exit_code == 0, swept.output
    lines = swept.stdout.splitlines()
    assert lines[0].startswith("[red]m/field.py:factory {'seed': 0, 'batch': 4} on cpu: ") and lines[0].endswith(out)
    assert any(line.strip() == "[red]m/field.py:factory: error against the float64 reference" for line in lines)
    assert f"results: {out}/results.parquet" in swept.stdout and f"report: {out}/report.md" in swept.stdout
    shown = run_cli("show", out, columns=200)
    assert shown.stdout.splitlines()[0].strip() == f"{out}: 1 of 1 configurations", shown.stdout
    reported = run_cli("report", out)
    assert reported.stdout.strip() == f"report: {out}/report.md (figures in {out}/figures)", reported.stdout
    checked = run_cli("check", out, "--baseline", out, "--markdown", "[red]:factory:.md")
    assert checked.stdout.splitlines()[-1] == "markdown summary: [red]:factory:.md", checked.stdout
    printed = swept.output + shown.output + reported.output + checked.output + refused.output + failed.output
    assert "\N{FACTORY}" not in printed
