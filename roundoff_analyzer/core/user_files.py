"""The files of a user's code beyond the one its spec names: the model file a factory imports, the user's own package,
each with its sha256, so that a sweep records every file its numbers depend on (the manifest's `settings.user_files`)
and `roundoff check` can name the one that changed.

They are found once, at plan time, from what loading the spec brought into `sys.modules` (user_code.py records it)
and, for what was imported before (a notebook's, or a second sweep's), from the modules the spec's module refers to,
followed through every module found: a module its globals hold, and the module of each class or function they hold.
A file counts as the user's where it lies outside the standard library and the installed packages (the site-packages
of this environment and of the Python it was made from) and outside this tool. Only `.py` files are found: a compiled
extension of one's own is not.
"""

from __future__ import annotations

import hashlib
import importlib.util
import site
import sys
import sysconfig
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from types import ModuleType

from .user_code import loaded_modules, ran_sha256


def _tool_folders() -> set[Path]:
    """This tool's own packages: roundoff_analyzer and the command line's (where it is installed editable, outside
    site-packages)."""
    folders = {Path(__file__).resolve().parent.parent}
    cli = importlib.util.find_spec("roundoff_cli")
    if cli is not None and cli.origin:
        folders.add(Path(cli.origin).resolve().parent)
    return folders


def user_files(specs: Iterable[str]) -> dict[str, str]:
    """Path -> sha256 of every file of the user's code that loading `specs` (`file.py:object` or `module:object`)
    brought in, other than the specs' own files (the manifest's `settings.user_code` holds those). A path is relative to
    the current folder where it lies below it, as a spec's path is given, else absolute."""
    starts = [loaded_modules(spec) for spec in specs]
    own = {file for modules in starts if modules for file in [_file(modules[0])] if file is not None}
    found: dict[Path, str] = {}
    seen: set[str] = set()
    queue = [module for modules in starts for module in modules]
    firsts = {id(modules[0]) for modules in starts if modules}
    while queue:
        module = queue.pop()
        if module.__name__ in seen:
            continue
        seen.add(module.__name__)
        file = _file(module)
        if id(module) not in firsts and (file is None or not _is_users(file)):
            continue
        if file is not None and file not in own:
            digest = ran_sha256(file) or _sha256(file)
            if digest is not None:
                found[file] = digest
        queue.extend(_referred(module))
    return {_shown(file): found[file] for file in sorted(found)}


def _referred(module: ModuleType) -> list[ModuleType]:
    """The modules `module`'s globals are or were defined in."""
    referred = []
    for value in list(vars(module).values()):
        if isinstance(value, ModuleType):
            referred.append(value)
            continue
        try:
            name = value.__module__ if isinstance(value, type) or callable(value) else None
        except Exception:  # noqa: BLE001 - an object of the user's may raise anything from an attribute
            name = None
        found = sys.modules.get(name) if isinstance(name, str) else None
        if isinstance(found, ModuleType):
            referred.append(found)
    return referred


def _file(module: ModuleType) -> Path | None:
    file = getattr(module, "__file__", None)
    if not isinstance(file, str) or not file.endswith(".py"):
        return None
    try:
        return Path(file).resolve()
    except OSError:
        return None


@cache
def _installed_roots() -> tuple[Path, ...]:
    """The standard library's folders and the installed packages', of this environment and its base Python."""
    roots = _tool_folders()
    for prefix in {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}:
        paths = sysconfig.get_paths(vars={"base": prefix, "platbase": prefix, "installed_base": prefix})
        roots.update(Path(paths[key]) for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths)
    roots.update(Path(p) for p in [*site.getsitepackages(), site.getusersitepackages()])
    return tuple(root.resolve() for root in roots)


def _is_users(file: Path) -> bool:
    return not any(file.is_relative_to(root) for root in _installed_roots())


def _sha256(file: Path) -> str | None:
    try:
        return hashlib.sha256(file.read_bytes()).hexdigest()
    except OSError:
        return None


def _shown(file: Path) -> str:
    try:
        return file.relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return file.as_posix()
