"""CONTRIBUTING.md's checklist stays true: every path it names exists, every name it places in a file is in that file,
every registry of the package has a row, and the README, where it too says where a new value goes, agrees with it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
CONTRIBUTING = ROOT / "CONTRIBUTING.md"
_FILE_ENDINGS = (".py", ".md", ".toml", ".txt", ".yml", ".sh")


def _rows(page: str) -> list[list[str]]:
    """The cells of every body row of the page's markdown tables."""
    rows = [[cell.strip() for cell in line.strip().strip("|").split(" | ")] for line in page.splitlines()]
    return [row for row, line in zip(rows, page.splitlines()) if line.startswith("| ") and not row[0].startswith("---")]


def _missing_paths(page: str) -> list[str]:
    """Backticked paths of the page (a slash in them, or a file's ending) that are not in the repository."""
    named = {span for span in re.findall(r"`([^`\s]+)`", page) if "/" in span or span.endswith(_FILE_ENDINGS)}
    return sorted(path for path in named if not (ROOT / path).exists())


def _misplaced_names(page: str) -> list[str]:
    """`NAME` (`path`) pairs of the page whose file does not define or mention NAME."""
    pairs = re.findall(r"`(\w+)` \(`([^`\s]+\.py)`", page)
    return [
        f"{name} in {path}"
        for name, path in pairs
        if (ROOT / path).exists() and not re.search(rf"\b{name}\b", (ROOT / path).read_text(encoding="utf-8"))
    ]


def _registries() -> dict[str, str]:
    """Every registry instance of the package (`X = Registry(...)` or a subclass's call): its name -> its file."""
    found = {}
    for module in sorted((ROOT / "roundoff_analyzer").rglob("*.py")):
        for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
            if isinstance(node, ast.AnnAssign | ast.Assign) and isinstance(node.value, ast.Call):
                called = node.value.func
                if isinstance(called, ast.Name) and re.fullmatch(r"\w*Registry\w*", called.id):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    for target in targets:
                        if isinstance(target, ast.Name):
                            found[target.id] = str(module.relative_to(ROOT))
    return found


def _readme_where_cells(readme: str) -> list[str]:
    """The non-empty "where a new one goes" cells of the README's layout table (none where it has no such column)."""
    section = readme[readme.index("## Where things are") : readme.index("## User guide")]
    header = next((line for line in section.splitlines() if line.startswith("| ")), "")
    columns = [cell.strip() for cell in header.strip().strip("|").split(" | ")]
    where = next((i for i, column in enumerate(columns) if column.startswith("where a new one goes")), None)
    if where is None:
        return []
    return [row[where] for row in _rows(section)[1:] if len(row) > where and row[where]]


def _disagreements(readme: str, contributing: str) -> list[str]:
    """Files the README says a new value goes in that CONTRIBUTING.md does not name."""
    named = set(re.findall(r"`([^`\s]+)`", contributing))
    return [
        f"{cell}: {name}"
        for cell in _readme_where_cells(readme)
        for name in re.findall(r"`([\w/]+(?:/|\.py))`", cell)
        if not any(path == name or path.endswith("/" + name.rstrip("/")) or path.endswith("/" + name) for path in named)
    ]


def test_every_path_contributing_names_exists() -> None:
    assert _missing_paths(CONTRIBUTING.read_text(encoding="utf-8")) == []


def test_every_name_contributing_places_in_a_file_is_in_that_file() -> None:
    assert _misplaced_names(CONTRIBUTING.read_text(encoding="utf-8")) == []


def test_a_wrong_path_or_a_misplaced_name_is_caught() -> None:
    page = "| x | `roundoff_analyzer/axes/nowhere.py`; `SECTIONS` (`roundoff_analyzer/axes/names.py`) |"
    assert _missing_paths(page) == ["roundoff_analyzer/axes/nowhere.py"]
    assert _misplaced_names(page) == ["SECTIONS in roundoff_analyzer/axes/names.py"]


def test_every_registry_of_the_package_has_a_row_naming_it() -> None:
    registries = _registries()
    assert {"METHODS", "SCALINGS", "LIBRARIES", "EXECUTORS", "UPDATES"} <= set(registries)
    named = {name for row in _rows(CONTRIBUTING.read_text(encoding="utf-8")) for name in re.findall(r"`(\w+)`", row[1])}
    assert sorted(set(registries) - named) == []


def test_the_failure_class_row_names_where_every_class_is_declared() -> None:
    from roundoff_analyzer.measuring import outcomes
    from roundoff_analyzer.measuring.outcomes import FailureClass

    row = next(row for row in _rows(CONTRIBUTING.read_text(encoding="utf-8")) if row[0] == "failure class")
    assert f"`FailureClass` (`{Path(outcomes.__file__).relative_to(ROOT)}`)" in row[1]
    assert len(FailureClass) >= 12


def test_the_readme_links_to_contributing_and_agrees_with_it_where_it_says_where_a_value_goes() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "(CONTRIBUTING.md)" in readme
    assert _disagreements(readme, CONTRIBUTING.read_text(encoding="utf-8")) == []


def test_a_readme_cell_naming_a_file_contributing_does_not_is_caught() -> None:
    readme = (
        "## Where things are\n\n| package | its job | where a new one goes |\n| --- | --- | --- |\n"
        "| `report/` | the report | report section: a module in `report/sections/`, one entry in `layout.py` |\n\n"
        "## User guide\n"
    )
    contributing = "| report section | a module in `roundoff_analyzer/report/sections/` |"
    assert _disagreements(readme, contributing) == [
        "report section: a module in `report/sections/`, one entry in `layout.py`: layout.py"
    ]


def test_no_test_of_this_run_is_both_unit_and_slow(request: pytest.FixtureRequest) -> None:
    # `-m unit` replaces the default `-m 'not slow'`: a slow test marked unit (a `pytestmark` over a file holding one)
    # would run in the unit tier.
    both = [
        item.nodeid
        for item in request.session.items
        if item.get_closest_marker("unit") and item.get_closest_marker("slow")
    ]
    assert both == []


def test_the_tests_workflow_installs_as_the_check_workflow_does_and_runs_the_checks_contributing_asks_for() -> None:
    workflows = ROOT / ".github" / "workflows"

    def installs(name: str) -> list[str]:
        return [
            line.strip()
            for line in (workflows / name).read_text(encoding="utf-8").splitlines()
            if line.strip().startswith("python -m pip install")
        ]

    assert installs("tests.yml") == installs("roundoff-check.yml") != []
    runs = (workflows / "tests.yml").read_text(encoding="utf-8")
    contributing = CONTRIBUTING.read_text(encoding="utf-8")
    for command in ("ruff check .", "ruff format --check .", "mypy", "pytest -q -m unit"):
        assert f"run: python -m {command}\n" in runs and command in contributing, command
