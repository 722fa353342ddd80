"""Solver libraries from outside the package: a file named on the command line, and an installed package's entry
point, found by the real importlib.metadata machinery in a fresh process."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from .conftest import TINY_OTFLOW, WIDE_TABLES, results, run_cli

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = "examples/unrolled_solver.py:library"


def roundoff(*args: str, cwd: Path = REPO, pythonpath: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": str(WIDE_TABLES)}  # `list`'s table is read cell by cell
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.run(
        [sys.executable, "-m", "roundoff_cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


@pytest.mark.slow  # three sweeps and a check: 10-12 s
def test_a_library_named_by_its_file_is_listed_swept_and_checked_against_a_baseline(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    listed = run_cli("list", "--library", EXAMPLE, columns=WIDE_TABLES)
    assert listed.exit_code == 0 and "unrolled for autograd" in listed.output
    grid = [
        "--model",
        "otflow",
        *TINY_OTFLOW,
        "--timesteps",
        "4,16",
        "--library",
        EXAMPLE,
        "--method",
        "euler,rk4,dopri5",
        "--dtype",
        "float16,bfloat16",
        "--scaling",
        "none",
        "--no-report",
    ]
    # A maintainer's CI: a committed baseline, then every change swept again and checked against it.
    assert run_cli("sweep", *grid, "--out", tmp_path / "baseline").exit_code == 0
    assert run_cli("sweep", *grid, "--out", tmp_path / "change").exit_code == 0
    table = results(tmp_path / "change")
    assert set(table.library) == {EXAMPLE}
    assert (table[table.method != "dopri5"].status == "ok").all()
    assert table[table.method == "dopri5"].skip_reason.str.contains("fixed grid only").all()
    checked = run_cli(
        "check", tmp_path / "change", "--baseline", tmp_path / "baseline", "--junit", tmp_path / "check.xml"
    )
    assert checked.exit_code == 0, checked.output
    assert "roundoff.otflow.examples_unrolled_solver_py_library" in (tmp_path / "check.xml").read_text()


@pytest.mark.unit
def test_bad_library_locations_are_one_line_and_exit_2(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    not_a_library = tmp_path / "not_a_library.py"
    not_a_library.write_text("thing = 3\n")
    cases = {
        "examples/no_such_file.py:library": "does not exist",
        "examples/unrolled_solver.py:nothing": "has no 'nothing'",
        f"{not_a_library}:thing": "is not a solver library; it lacks name, description",
        "no_such_package.solvers:library": "cannot import no_such_package.solvers",
    }
    for spec, message in cases.items():
        result = run_cli("sweep", "--model", "otflow", "--library", spec, "--out", tmp_path / "never")
        assert result.exit_code == 2, result.output
        assert result.stdout == "" and result.stderr.count("\n") == 1 and message in result.stderr, result.stderr
    assert not (tmp_path / "never").exists()


def _installed_package(site: Path) -> None:
    """A package as pip would leave it: the module, and a .dist-info whose entry_points.txt declares the library."""
    (site / "tiny_solver_pkg").mkdir(parents=True)
    (site / "tiny_solver_pkg" / "__init__.py").write_text(
        textwrap.dedent("""
        import torch


        class ForwardEuler:
            name = "tiny-euler"
            description = "the tiny package's forward Euler, autograd through every step"
            supports_adjoint_scaling = False

            def unsupported_method_reason(self, method):
                return None if method.name == "euler" else "tiny-euler has euler only"

            def solve(self, func, y0, t, method, scaler, report):
                states = [y0]
                for k in range(t.numel() - 1):
                    states.append(states[-1] + (t[k + 1] - t[k]) * func(t[k], states[-1]))
                return torch.stack(states)
    """)
    )
    dist_info = site / "tiny_solver_pkg-0.1.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: tiny-solver-pkg\nVersion: 0.1\n")
    (dist_info / "entry_points.txt").write_text(
        "[roundoff_analyzer.libraries]\ntiny-euler = tiny_solver_pkg:ForwardEuler\n"
    )


@pytest.mark.slow  # four fresh processes, each importing torch: 20-35 s
def test_an_installed_package_appears_in_list_by_its_entry_point_and_sweeps(tmp_path):
    site = tmp_path / "site"
    _installed_package(site)
    listed = roundoff("list", pythonpath=site)
    assert listed.returncode == 0, listed.stderr
    assert "│ tiny-euler " in listed.stdout and "the tiny package's forward Euler" in " ".join(listed.stdout.split())
    swept = roundoff(
        "sweep",
        "--model",
        "otflow",
        *TINY_OTFLOW,
        "--timesteps",
        "4",
        "--library",
        "tiny-euler,torchdiffeq",
        "--method",
        "euler,rk4",
        "--dtype",
        "float16",
        "--scaling",
        "none",
        "--no-report",
        "--out",
        str(tmp_path / "s"),
        pythonpath=site,
    )
    assert swept.returncode == 0, swept.stderr
    table = results(tmp_path / "s").set_index(["library", "method"])
    assert table.loc[("tiny-euler", "euler")].status == "ok"
    assert table.loc[("tiny-euler", "rk4")].skip_reason == "tiny-euler has euler only"
    # Forward Euler is forward Euler: the package's errors are torchdiffeq's, to the last bit.
    assert table.loc[("tiny-euler", "euler")].sol_rel_err == table.loc[("torchdiffeq", "euler")].sol_rel_err
    # Without the package on the path, the name is unknown again.
    assert "unknown library 'tiny-euler'" in roundoff("sweep", "--model", "otflow", "--library", "tiny-euler").stderr


@pytest.mark.slow  # two fresh processes, each importing torch: 10-20 s
def test_an_entry_point_that_fails_to_load_is_listed_with_its_reason_and_breaks_nothing(tmp_path):
    site = tmp_path / "site"
    dist_info = site / "broken_pkg-0.1.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-pkg\nVersion: 0.1\n")
    (dist_info / "entry_points.txt").write_text("[roundoff_analyzer.libraries]\nbroken = broken_pkg_missing:library\n")
    listed = roundoff("list", pythonpath=site)
    assert listed.returncode == 0, listed.stderr
    text = " ".join(listed.stdout.split())
    assert "│ broken " in text and "broken_pkg_missing" in text  # the reason: no module of that name
    refused = roundoff("sweep", "--model", "otflow", "--library", "broken", pythonpath=site)
    assert refused.returncode == 2 and "library 'broken' cannot be used here" in refused.stderr


class _PlainLibrary:
    """A plug-in written before the protocol declared what the report reads: none of the optional members."""

    name = "plain"
    description = "a plug-in with only the required members"
    supports_adjoint_scaling = False

    def unsupported_method_reason(self, method):
        return None

    def solve(self, func, y0, t, method, scaler, report):
        raise NotImplementedError


class _PlainScaling:
    name = "plain"
    description = "a scaling with only the required members"

    def skip_reason(self, library):
        return None


def test_a_plugin_library_or_scaling_without_the_declared_members_reads_their_defaults():
    from roundoff_analyzer.axes.libraries.base import _OPTIONAL as LIBRARY_OPTIONAL
    from roundoff_analyzer.axes.libraries.base import NO_IMPORT_LINE, SolverLibrary
    from roundoff_analyzer.axes.methods import METHODS
    from roundoff_analyzer.axes.methods.base import tableau_of
    from roundoff_analyzer.axes.scalings.base import _OPTIONAL as SCALING_OPTIONAL
    from roundoff_analyzer.axes.scalings.base import ScalingRegistry
    from roundoff_analyzer.core.registry import RegistryWithDefaults, unwrap

    libraries: RegistryWithDefaults[SolverLibrary] = RegistryWithDefaults("library", LIBRARY_OPTIONAL)
    plugin = _PlainLibrary()
    library = libraries.register(plugin)
    assert unwrap(library) is plugin and library.description == plugin.description
    assert library.import_line == NO_IMPORT_LINE.format(name="plain")
    assert (library.native_solver, library.returns_low_trajectory, library.routed_function) == (False, False, None)
    method = METHODS.get("rk4")
    assert tableau_of(library, method) == method.tableau
    scaling = ScalingRegistry("scaling").register(_PlainScaling())
    assert set(SCALING_OPTIONAL) >= {"scales", "searches_scale"}
    assert scaling.scales is True and scaling.searches_scale is False and scaling.words == "`plain` scaling"


def test_a_library_that_declares_the_members_is_registered_as_it_is():
    from roundoff_analyzer.axes.libraries import LIBRARIES

    native, low = LIBRARIES.get("native"), LIBRARIES.get("native-low")
    assert type(native).__name__ == "NativeLibrary" and native.native_solver and not native.returns_low_trajectory
    assert low.native_solver and low.returns_low_trajectory
    assert LIBRARIES.get("torchdiffeq").import_line is None


# The report's and the judging's modules read what a library or a scaling does from its declared members, never by
# comparing a name with a built-in one. Allowed: none.
_BUILT_IN_NAMES = {"native", "native-low", "torchdiffeq", "torchdiffeq-adjoint", "torchode", "torchdyn", "rampde"}
_BUILT_IN_SCALINGS = {"none", "grad", "dynamic"}


def _compared_names(path: Path) -> list[str]:
    import ast

    found = []
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        text = ast.unparse(node)
        mentions_library = "library" in text
        mentions_scaling = "scaling" in text and "keep_float32" not in text
        for operand in operands:
            values = [operand] if isinstance(operand, ast.Constant) else getattr(operand, "elts", [])
            strings = {v.value for v in values if isinstance(v, ast.Constant) and isinstance(v.value, str)}
            if (mentions_library and strings & _BUILT_IN_NAMES) or (mentions_scaling and strings & _BUILT_IN_SCALINGS):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: {text}")
    # A name list handed to .isin(...) is a comparison too.
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "isin":
            text = ast.unparse(node)
            if any(f'"{name}"' in text or f"'{name}'" in text for name in _BUILT_IN_NAMES | _BUILT_IN_SCALINGS):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: {text}")
    return found


def test_no_report_or_judging_module_compares_a_library_or_scaling_with_a_built_in_name():
    package = REPO / "roundoff_analyzer"
    modules = sorted([*(package / "report").rglob("*.py"), *(package / "judging").rglob("*.py")])
    found = [line for path in modules for line in _compared_names(path)]
    assert found == []
