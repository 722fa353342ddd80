"""Solver libraries from outside this package: `--library path/to/file.py:object` or `package.module:object`, and
installed packages that declare an entry point in the group `roundoff_analyzer.libraries`.

The object is a SolverLibrary (see base.py): an instance, or a class or function that makes one without arguments.
A library named by its location is registered under that location, which is also its name in the results (as a
model named by its factory is); one from an entry point under the entry point's name. A library named by its location
whose file changed since this process loaded it is loaded again, in place of the old one (a notebook that edits it
between two sweeps runs the code the manifest's sha256 names).
"""

from __future__ import annotations

import importlib.metadata
import inspect

from ...core.errors import InputError, one_line
from ...core.registry import unwrap
from ...core.text import shortened
from ...core.user_code import load_attribute, quit_line, source_changed
from ..names import LIBRARY_ENTRY_POINTS
from .base import LIBRARIES, MISSING_LIBRARIES, SolverLibrary, UnavailableLibrary
from .optional import LazyLibrary

ENTRY_POINT_GROUP = LIBRARY_ENTRY_POINTS  # named in axes/names.py, which --help reads without importing this
FORMS = "package.module:object or path/to/file.py:object"
_MEMBERS = ("name", "description", "supports_adjoint_scaling", "unsupported_method_reason", "solve")


def resolve_library(name: str) -> SolverLibrary:
    """The library called `name`: registered, or loaded (and registered) from the location it names."""
    if name in LIBRARIES and not source_changed(name):
        library = LIBRARIES.get(name)
        if isinstance(lazy := unwrap(library), LazyLibrary):
            lazy.load()  # an optional package that is installed but broken is one line now, not a failed row per run
        return library
    if ":" in name:
        what = f"library '{name}'"
        _, attribute, made = load_attribute(what, name, FORMS)
        if made is None:
            raise InputError(f"{what}: {name.rpartition(':')[0]} has no '{attribute}'")
        return LIBRARIES.replace(_library(what, made), name)
    if name in MISSING_LIBRARIES:
        missing = MISSING_LIBRARIES.get(name)
        install = f"; install it with: {missing.install}" if missing.install else ""
        raise InputError(f"library '{name}' cannot be used here: {missing.reason}{install}")
    known = LIBRARIES.names() + MISSING_LIBRARIES.names()
    raise InputError(f"unknown library '{shortened(name)}'; known: {', '.join(known)}, or your own as {FORMS}")


def load_entry_points() -> None:
    """Register every library that an installed package declares; one that fails to load is listed with the reason."""
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        what = f"library '{entry_point.name}' (entry point {entry_point.value} of {_distribution(entry_point)})"
        try:
            library = _library(what, entry_point.load())
            LIBRARIES.register(library, name=entry_point.name)
        except Exception as exc:  # noqa: BLE001 - someone else's package must not break this one
            reason = str(exc) if isinstance(exc, (InputError, ValueError)) else f"loading it raised {one_line(exc)}"
            if entry_point.name not in MISSING_LIBRARIES and entry_point.name not in LIBRARIES:
                MISSING_LIBRARIES.register(UnavailableLibrary(entry_point.name, reason))


def _library(what: str, made) -> SolverLibrary:
    if inspect.isclass(made) or (callable(made) and not hasattr(made, "solve")):
        try:
            made = made()
        except SystemExit as exc:
            raise InputError(quit_line(f"{what}: making the library", exc)) from None
        except Exception as exc:  # noqa: BLE001 - the user's constructor failed; say so in one line
            raise InputError(f"{what}: making the library raised {one_line(exc)}") from None
    missing = [member for member in _MEMBERS if not hasattr(made, member)]
    if missing:
        raise InputError(
            f"{what}: a {type(made).__name__} is not a solver library; it lacks {', '.join(missing)} (see "
            "SolverLibrary)"
        )
    return made


def _distribution(entry_point: importlib.metadata.EntryPoint) -> str:
    dist = getattr(entry_point, "dist", None)
    return f"{dist.name} {dist.version}" if dist is not None else "an installed package"
