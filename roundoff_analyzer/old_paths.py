"""Import paths from before the package was laid out by stage keep working: a user's factory or plug-in that imports
`roundoff_analyzer.models.otflow`, `roundoff_analyzer.libraries` or `roundoff_analyzer.errors` gets the module that
now lives under `axes/` or `core/` (the same object, so its registries and exception classes are the ones in use).

Standard library only: the package installs the finder when it is imported, before anything heavy loads."""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types

PACKAGE = __name__.rpartition(".")[0]
# Old name -> new name; a name's submodules move with it (`models.otflow` -> `axes.models.otflow`).
MOVED: dict[str, str] = {
    **{axis: f"axes.{axis}" for axis in ("arithmetics", "data", "dtypes", "libraries", "methods", "models", "modes", "roundings",
                                           "scalings")},  # fmt: skip
    "errors": "core.errors",
}


def new_name(fullname: str) -> str | None:
    """Where the module that `fullname` named in the flat layout lives now, or None when it did not move."""
    prefix = f"{PACKAGE}."
    if not fullname.startswith(prefix):
        return None
    relative = fullname[len(prefix):]
    for old, new in MOVED.items():
        if relative == old or relative.startswith(f"{old}."):
            return f"{prefix}{new}{relative[len(old):]}"
    return None


class OldPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path=None, target=None) -> importlib.machinery.ModuleSpec | None:
        return importlib.util.spec_from_loader(fullname, self) if new_name(fullname) else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        # The import system returns what sys.modules holds once the loader is done: the module under its new name.
        sys.modules[module.__name__] = importlib.import_module(new_name(module.__name__))


def install() -> None:
    # First on the path: the finders behind it would load the moved file a second time under its old name.
    if not any(isinstance(finder, OldPaths) for finder in sys.meta_path):
        sys.meta_path.insert(0, OldPaths())
