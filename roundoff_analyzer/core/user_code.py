"""Loading a user's object named as `package.module:object` or `path/to/file.py:object` (a model's factory, a solver
library, an optimizer's factory); every failure is one InputError line that says what was asked for and what went wrong.

A process may load one twice (a notebook that edits its library between two sweeps): what runs is the source as it is
at the second load, and `source_sha256`, which the manifest records, is that of the source that ran. A file is executed
from the bytes whose digest is kept; a module that changed since this process ran it is imported again."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

from .errors import InputError, one_line

# The module name under which a user's file is loaded.
_FILE_MODULE_PREFIX = "roundoff_user_"

# The sha256 of the source this process last ran of each user file it loaded an object from, by the file's resolved
# path: what `source_sha256` answers, and what a later load compares the file with.
_RAN: dict[Path, str] = {}
# The modules a user's file imported from its own folder when it last ran (`from latent import Encoder`: latent.py
# beside it), with their files' sha256 then, by the file's resolved path: one whose file changed since is imported
# afresh when the file runs again, as a new process would import it.
_BESIDE: dict[Path, dict[str, str]] = {}
# The modules a user's file or module brought into sys.modules when it last ran, by its resolved path: where
# user_files.py starts looking (those a second run finds imported already, it reaches from the module's globals).
_BROUGHT: dict[Path, set[str]] = {}


def quit_line(what: str, exc: SystemExit) -> str:
    """The line for user code that tried to end the process: a failure, whatever the exit code it gave."""
    return f"{what} called sys.exit({exc.code!r}); the code a sweep loads must return or raise, not end the process"


def load_attribute(what: str, spec: str, forms: str) -> tuple[ModuleType, str, Any]:
    """The module `spec` points to, the attribute's name, and the attribute (None when the module has none).

    `what` names the thing in messages (e.g. "model 'x.py:f'"), `forms` says which forms are allowed."""
    target, _, attribute = spec.rpartition(":")
    if not target or not attribute:
        raise InputError(f"{what} is not of the form {forms}")
    module = _load_file(what, Path(target)) if _is_file_spec(target) else _import(what, target, forms)
    return module, attribute, getattr(module, attribute, None)


def source_sha256(spec: str) -> str | None:
    """The sha256 of the file that `spec` (`package.module:object` or `path/to/file.py:object`) loads its object from:
    of the source this process ran where it loaded it, else of the file as it is; None where there is no such file to
    read (a built-in, a namespace)."""
    target, _, attribute = spec.rpartition(":")
    try:
        path = _source_file(target)
        return _RAN.get(path.resolve()) or _sha256(path)
    except (AttributeError, ImportError, OSError, ValueError):
        return _loaded_source_sha256(target, attribute)


def source_changed(spec: str) -> bool:
    """Whether the file `spec` loads its object from differs now from the source this process ran of it (or is gone):
    an object registered from it is then the old code, and is loaded again."""
    target = spec.rpartition(":")[0]
    try:
        path = _source_file(target).resolve()
    except (AttributeError, ImportError, OSError, ValueError):
        return False
    if path not in _RAN:
        return False
    try:
        return _sha256(path) != _RAN[path]
    except OSError:
        return True


def _is_file_spec(target: str) -> bool:
    return target.endswith(".py") or "/" in target


def _source_file(target: str) -> Path:
    return Path(target) if _is_file_spec(target) else _module_file(target)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


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
    loaded = sys.modules.get(module_name)
    again = loaded is not None and _edited_since_run(loaded)
    importing = f"importing {module_name}" + (" again (its file changed since this process ran it)" if again else "")
    before = set(sys.modules)
    try:
        with _own_argv(module_name):
            module = importlib.reload(loaded) if again and loaded is not None else importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise InputError(f"{what}: cannot import {module_name} ({exc}); give {forms}") from None
    except SystemExit as exc:
        raise InputError(quit_line(f"{what}: {importing}", exc)) from None
    except Exception as exc:  # noqa: BLE001 - the module itself failed while importing
        restart = "; start a new process to use the edited file" if again else ""
        raise InputError(f"{what}: {importing} raised {one_line(exc)}{restart}") from None
    file = _file_of(module)
    if file is not None:
        _note_brought(file, before, module_name)
        try:
            _RAN[file] = _sha256(file)
        except OSError:
            _RAN.pop(file, None)
    return module


def _note_brought(file: Path, before: set[str], own_name: str) -> None:
    _BROUGHT[file] = set(sys.modules) - before - {own_name}


def loaded_modules(spec: str) -> list[ModuleType]:
    """The module `spec`'s object was loaded from, first, then those its loading brought into sys.modules (empty where
    it is not loaded): where the search for the files of the user's code starts (user_files.py)."""
    target = spec.rpartition(":")[0]
    if _is_file_spec(target):
        module = sys.modules.get(f"{_FILE_MODULE_PREFIX}{Path(target).stem}")
        if module is None or _file_of(module) != Path(target).resolve():
            return []
    else:
        module = sys.modules.get(target)
        if module is None:
            return []
    file = _file_of(module)
    brought = sorted(_BROUGHT.get(file, set())) if file is not None else []
    return [module, *(m for m in (sys.modules.get(name) for name in brought) if isinstance(m, ModuleType))]


def ran_sha256(file: Path) -> str | None:
    """The sha256 of the source this process ran of the user's `file` (resolved), where it loaded it itself."""
    return _RAN.get(file)


def _file_of(module: ModuleType) -> Path | None:
    """The source file a module was imported from; None for one without (a namespace, a built-in, `__main__`, which is
    the running script or notebook itself and never imported again)."""
    file = getattr(module, "__file__", None)
    if module.__name__ == "__main__" or not file or not file.endswith(".py"):
        return None
    return Path(file).resolve()


def _edited_since_run(module: ModuleType) -> bool:
    """Whether an imported module's file differs from what was run of it: the source this process ran, where it
    imported the module itself. Imported by the user's own code first, what was run of it cannot be known: then
    whether the bytecode Python cached for it was compiled from another version of the file, or, where there is none,
    whether the file was written after this process started."""
    file = _file_of(module)
    if file is None:
        return False
    try:
        if file in _RAN:
            return _sha256(file) != _RAN[file]
        cached = _bytecode_matches(file)
        return not cached if cached is not None else file.stat().st_mtime > _process_start()
    except OSError:
        return False  # importing it again would fail alike; what runs is what was imported


def _bytecode_matches(file: Path) -> bool | None:
    """Whether the bytecode cached beside `file` (`__pycache__`) was compiled from the file as it is now, by the
    source's modification time and size its header records; None where there is no such header to read. (This tool
    writes none for a user's module: `_own_argv`.)"""
    try:
        header = Path(importlib.util.cache_from_source(str(file))).read_bytes()[:16]
        stat = file.stat()
    except (OSError, NotImplementedError, ValueError):
        return None
    if len(header) < 16 or header[:4] != importlib.util.MAGIC_NUMBER or header[4:8] != bytes(4):
        return None  # another version's, or checked by the source's hash rather than its time
    recorded_mtime, recorded_size = int.from_bytes(header[8:12], "little"), int.from_bytes(header[12:16], "little")
    return recorded_mtime == int(stat.st_mtime) & 0xFFFFFFFF and recorded_size == stat.st_size & 0xFFFFFFFF


def _process_start() -> float:
    """When this process started (seconds since the epoch), from Linux's /proc; elsewhere when this module was
    imported, a later time."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rpartition(")")[2].split()[19])
        boot = next(
            float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime")
        )
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return _IMPORTED_AT


_IMPORTED_AT = time.time()


def _load_file(what: str, path: Path) -> ModuleType:
    """The file run afresh as a module, from the bytes whose sha256 is kept as what ran (the file may change while it
    runs); the modules it imported from its own folder when it last ran are imported afresh too."""
    if not path.is_file():
        raise InputError(f"{what}: file '{path}' does not exist")
    module_name = f"{_FILE_MODULE_PREFIX}{path.stem}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise InputError(f"{what}: '{path}' cannot be loaded as a Python module")
    try:
        source = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{what}: cannot read '{path}' ({one_line(exc)})") from None
    resolved = path.resolve()
    unchanged = {}
    for name, digest in _BESIDE.pop(resolved, {}).items():
        if _file_digest(sys.modules.get(name)) == digest:
            unchanged[name] = digest
        else:
            sys.modules.pop(name, None)
    module = importlib.util.module_from_spec(spec)
    # Registered before running it, so that dataclasses and pickling inside the file find their module.
    sys.modules[module_name] = module
    before = set(sys.modules)
    try:
        with _own_argv(str(path)), _folder_first_on_path(path.parent):
            exec(compile(source, str(path), "exec", dont_inherit=True), module.__dict__)
    except SystemExit as exc:
        del sys.modules[module_name]
        raise InputError(quit_line(f"{what}: running {path}", exc)) from None
    except Exception as exc:  # noqa: BLE001 - the user's file failed; say so in one line
        del sys.modules[module_name]
        raise InputError(f"{what}: running {path} raised {one_line(exc)}") from None
    finally:
        _BESIDE[resolved] = unchanged | _imported_beside(resolved.parent, before)
    _note_brought(resolved, before, module_name)
    _RAN[resolved] = hashlib.sha256(source).hexdigest()
    return module


def _imported_beside(folder: Path, before: set[str]) -> dict[str, str]:
    """The modules imported since `before` whose files lie in `folder` itself, with their files' sha256."""
    beside = {}
    for name in set(sys.modules) - before:
        module = sys.modules.get(name)
        file = _file_of(module) if isinstance(module, ModuleType) else None
        digest = _file_digest(module)
        if file is not None and file.parent == folder and digest is not None:
            beside[name] = digest
    return beside


def _file_digest(module: object) -> str | None:
    """The sha256 of a module's source file as it is now; None where it has none, or it cannot be read."""
    file = _file_of(module) if isinstance(module, ModuleType) else None
    try:
        return _sha256(file) if file is not None else None
    except OSError:
        return None
