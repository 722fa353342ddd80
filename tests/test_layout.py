"""The package reads as the data flow: packages by stage, imports only down the stages and never in a circle (read from
the source with ast, nothing executed), the API's names are plain functions, and importing the package adds no import
hook."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import roundoff_analyzer as ra

pytestmark = pytest.mark.unit

PACKAGE = Path(ra.__file__).parent
# The stages, lowest first: a module imports from its own stage or a lower one. The native solver shares the axes'
# stage: it steps with the method axis's tableaux, and the `native` library and the `dynamic` scaling wrap it.
STAGES = [
    ("core",),
    ("emulation",),
    ("axes", "solvers"),
    ("measuring",),
    ("planning",),
    ("storage",),
    ("execution",),
    ("judging",),
    ("report",),
    ("training",),
]
# The public modules compose the stages (the sweep API; the plug-in authors' imports, which reach the training's
# registries; the commands the command line hands its requests to); nothing below imports them.
TOP = ("api", "plugins", "commands")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in PACKAGE.rglob("*.py")}


def imports_of(name: str) -> set[str]:
    """Every module of the package that `name` imports: at the top, inside functions, under TYPE_CHECKING alike."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            targets = [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            while (
                target and target not in MODULES
            ):  # `from pkg import name`: the module, else the package that holds it
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


GRAPH = {name: imports_of(name) for name in MODULES}


def stage(name: str) -> int:
    parts = name.split(".")
    if len(parts) == 1 or parts[1] in TOP:
        return len(STAGES)
    return next(i for i, packages in enumerate(STAGES) if parts[1] in packages)


def test_every_module_belongs_to_a_stage():
    unplaced = []
    for name in MODULES:
        try:
            stage(name)
        except StopIteration:
            unplaced.append(name)
    assert not unplaced, f"modules outside every stage (add their package to STAGES): {unplaced}"


def test_no_import_goes_up_a_stage():
    upward = [
        f"{name} -> {target}" for name, targets in GRAPH.items() for target in targets if stage(target) > stage(name)
    ]
    assert not upward, "\n".join(upward)
    assert not [name for name, targets in GRAPH.items() if ra.__name__ in targets], (
        "the package's root is imported from below"
    )


def test_the_imports_have_no_circle():
    cycle = find_cycle(GRAPH)
    assert cycle is None, " -> ".join(cycle)


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle of `graph` as the path around it, or None: a depth-first walk that meets a module still on its
    path."""
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(name: str) -> list[str] | None:
        state[name], path[len(path) :] = "open", [name]
        for target in sorted(graph[name]):
            if state.get(target) == "open":
                return path[path.index(target) :] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        state[name] = "done"
        path.pop()
        return None

    return next((cycle for name in sorted(graph) if name not in state and (cycle := visit(name))), None)


def test_the_circle_finder_finds_a_circle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_the_api_names_are_plain_functions_with_their_own_signatures():
    from roundoff_analyzer.api import load, sweep
    from roundoff_analyzer.training.api import train

    assert ra.sweep is sweep and ra.load is load and ra.train is train
    for function in (ra.sweep, ra.load, ra.train):
        assert inspect.isfunction(function) and function.__doc__
    assert list(inspect.signature(ra.sweep).parameters)[:4] == ["model", "config", "out", "force"]
    assert ra.sweep.__doc__.startswith("Run a sweep")


# All the command line (`cli/`, installed as `roundoff_cli`) sees of the package: the public modules, and the
# commands it hands each command's request to.
CLI_SURFACE = {"roundoff_analyzer", "roundoff_analyzer.plugins", "roundoff_analyzer.api", "roundoff_analyzer.commands"}


def internal_imports_of_the_cli() -> list[str]:
    """Each import in `cli/` of a module of the package outside CLI_SURFACE, or of a name the package's root does not
    declare public, as `file: module`."""
    import roundoff_cli

    found = []
    for path in sorted(Path(roundoff_cli.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [node.module]
                if node.module == ra.__name__:  # `from roundoff_analyzer import x`: x may be a module too
                    targets += [f"{node.module}.{alias.name}" for alias in node.names if alias.name not in ra.__all__]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            found += [
                f"{path.name}: {target}"
                for target in targets
                if target.split(".")[0] == ra.__name__ and target not in CLI_SURFACE
            ]
    return found


def test_the_command_line_imports_nothing_of_the_package_but_its_public_surface():
    assert internal_imports_of_the_cli() == []


def test_importing_the_package_adds_no_import_hook():
    """The package changes nothing in how Python finds modules: `sys.meta_path` is as long after the import as
    before."""
    code = "import sys; before = len(sys.meta_path); import roundoff_analyzer; print(before, len(sys.meta_path))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120
    )
    before, after = out.stdout.split()
    assert before == after, out.stderr
