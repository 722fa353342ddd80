"""Libraries whose package is optional: listed when their packages are installed, imported only when a sweep uses
them (importing torchode or torchdyn costs seconds), and otherwise listed with the line that installs them."""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util

from ...core.errors import InputError, one_line
from .base import LIBRARIES, MISSING_LIBRARIES, LibraryAdapter, UnavailableLibrary


class LazyLibrary:
    """Stands in for the adapter module's `LIBRARY` until anything but its name and description is asked for."""

    def __init__(self, name: str, adapter: str, description: str) -> None:
        self.name, self.description, self._adapter = name, description, adapter
        self._library: LibraryAdapter | None = None

    def load(self) -> LibraryAdapter:
        if self._library is None:
            try:
                self._library = importlib.import_module(f"{__package__}.{self._adapter}").LIBRARY
            except ImportError as exc:
                raise InputError(f"library '{self.name}' is installed but does not import: {one_line(exc)}") from None
        return self._library

    def __getattr__(self, attribute: str):
        if attribute.startswith("_"):
            raise AttributeError(attribute)
        return getattr(self.load(), attribute)


def register_optional(name: str, adapter: str, packages: tuple[str, ...], install: str, about: str) -> None:
    """Register library `name` (adapter module `adapter`) when every one of `packages` is installed."""
    absent = [package for package in packages if importlib.util.find_spec(package) is None]
    if absent:
        MISSING_LIBRARIES.register(UnavailableLibrary(name, f"not installed (no {', '.join(absent)})", install))
        return
    LIBRARIES.register(LazyLibrary(name, adapter, f"{packages[0]} {importlib.metadata.version(packages[0])}: {about}"))
