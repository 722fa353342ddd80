"""Loading a user's object named as `package.module:object` or `path/to/file.py:object` (a model's factory, a solver
library); every failure is one InputError line that says what was asked for and what went wrong."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

from .errors import InputError, one_line

# The module name under which a user's file is loaded.
_FILE_MODULE_PREFIX = "roundoff_user_"


def quit_line(what: str, exc: SystemExit) -> str:
    """The line for user code that tried to end the process: a failure, whatever the exit code it gave."""
    return f"{what} called sys.exit({exc.code!r}); the code a sweep loads must return or raise, not end the process"


def load_attribute(what: str, spec: str, forms: str) -> tuple[ModuleType, str, Any]:
    """The module `spec` points to, the attribute's name, and the attribute (None when the module has none).

    `what` names the thing in messages (e.g. "model 'x.py:f'"), `forms` says which forms are allowed."""
    target, _, attribute = spec.rpartition(":")
    if not target or not attribute:
        raise InputError(f"{what} is not of the form {forms}")
    module = _load_file(what, Path(target)) if target.endswith(".py") or "/" in target else _import(what, target, forms)
    return module, attribute, getattr(module, attribute, None)


def source_sha256(spec: str) -> str | None:
    """The sha256 of the file that `spec` (`package.module:object` or `path/to/file.py:object`) loads its object from;
    None where there is no such file to read (a built-in, a namespace)."""
    target, _, attribute = spec.rpartition(":")
    try:
        path = Path(target) if target.endswith(".py") or "/" in target else _module_file(target)
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except (AttributeError, ImportError, OSError, ValueError):
        return _loaded_source_sha256(target, attribute)


def _module_file(name: str) -> Path:
    """The file the module `name` is found in ("" where it has none); ImportError where there is no such module."""
    found = importlib.util.find_spec(name)
    if found is None:
        raise ImportError(f"no module named {name!r}")
    return Path(found.origin or "")


def _loaded_source_sha256(module_name: str, attribute: str) -> str | None:
    """For a module that is loaded but cannot be found again (a script's or a notebook's `__main__`): its file's sha256,
    else that of the object's source."""
    module = sys.modules.get(module_name)
    if module is None:
        return None
    try:
        file = getattr(module, "__file__", None)
        source = Path(file).read_bytes() if file else inspect.getsource(getattr(module, attribute)).encode()
    except (AttributeError, OSError, TypeError):
        return None
    return hashlib.sha256(source).hexdigest()


def function_spec(what: str, function: Any, forms: str) -> str:
    """`package.module:name` (or `path/to/file.py:name` for a file the tool loaded) for a function given itself: the
    name a sweep records and loads it by, as if it had been given as text. It must be defined at the top level of its
    module, so that the name finds it again."""
    module_name: str = getattr(function, "__module__", None) or ""
    name = getattr(function, "__qualname__", "")
    module = sys.modules.get(module_name)
    if module is None or getattr(module, name, None) is not function:
        raise InputError(
            f"{what} {name or function!r} is not defined at the top level of a module (a lambda or a function defined "
            f"inside another cannot be loaded again by name); define it at the top level, or give {forms}"
        )
    file = getattr(module, "__file__", None)
    # A file the tool loaded itself has a module name of its own making: the file's path finds it again.
    target = file if module_name.startswith(_FILE_MODULE_PREFIX) and file else module_name
    return f"{target}:{name}"


def module_label(module_name: str, file: str | None) -> str:
    """A module's name as its user knows it: the file's stem for a file the tool loaded itself (whose module name is
    of the tool's making), the dotted name otherwise."""
    return Path(file).stem if module_name.startswith(_FILE_MODULE_PREFIX) and file else module_name


@contextmanager
def _own_argv(name: str) -> Iterator[None]:
    """The user's module sees a command line of its own name only: one that parses sys.argv finds no roundoff options,
    and a usage line it prints names it, not roundoff. Its import writes no `__pycache__` beside it: the user's folder
    holds what they wrote, whatever the command then finds wrong with it."""
    saved, sys.argv = sys.argv, [name]
    bytecode, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        yield
    finally:
        sys.argv, sys.dont_write_bytecode = saved, bytecode


@contextmanager
def _folder_first_on_path(folder: Path) -> Iterator[None]:
    """While a user's file runs, its own folder is searched first for what it imports, as Python does for a script:
    `from latent import Encoder` finds the `latent.py` beside it. The entry is taken out again afterwards (what the
    file imported stays imported), so that the folder does not shadow modules the tool imports later."""
    entry = str(folder.resolve())
    sys.path.insert(0, entry)
    try:
        yield
    finally:
        if entry in sys.path:  # the file may have taken it out itself
            sys.path.remove(entry)


def _import(what: str, module_name: str, forms: str) -> ModuleType:
    # Like `python -m`, modules in the current folder are found without installing them.
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    try:
        with _own_argv(module_name):
            return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise InputError(f"{what}: cannot import {module_name} ({exc}); give {forms}") from None
    except SystemExit as exc:
        raise InputError(quit_line(f"{what}: importing {module_name}", exc)) from None
    except Exception as exc:  # noqa: BLE001 - the module itself failed while importing
        raise InputError(f"{what}: importing {module_name} raised {one_line(exc)}") from None


def _load_file(what: str, path: Path) -> ModuleType:
    if not path.is_file():
        raise InputError(f"{what}: file '{path}' does not exist")
    module_name = f"{_FILE_MODULE_PREFIX}{path.stem}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise InputError(f"{what}: '{path}' cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(spec)
    # Registered before running it, so that dataclasses and pickling inside the file find their module.
    sys.modules[module_name] = module
    try:
        with _own_argv(str(path)), _folder_first_on_path(path.parent):
            spec.loader.exec_module(module)
    except SystemExit as exc:
        del sys.modules[module_name]
        raise InputError(quit_line(f"{what}: running {path}", exc)) from None
    except Exception as exc:  # noqa: BLE001 - the user's file failed; say so in one line
        del sys.modules[module_name]
        raise InputError(f"{what}: running {path} raised {one_line(exc)}") from None
    return module
