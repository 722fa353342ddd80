"""One registry per sweep axis: name -> implementation, with a clear error for unknown names."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Generic, Protocol, TypeVar, cast

from .errors import InputError

T = TypeVar("T")


class Named(Protocol):
    """What an item registered without an explicit name has: its own `name`."""

    name: str


class Registry(Generic[T]):
    def __init__(self, axis: str) -> None:
        self.axis = axis
        self._items: dict[str, T] = {}
        # Families of names (such as eXmY formats): a builder that returns the item for a name of its form, else None.
        self._families: list[tuple[Callable[[str], T | None], str]] = []

    def register(self, item: T, name: str | None = None) -> T:
        """Register `item` under its own `name`, or under `name` (a user's object named by where it lives)."""
        name = name or cast(Named, item).name
        if name in self._items:
            raise ValueError(f"{self.axis} '{name}' is registered twice")
        self._items[name] = item
        return item

    def replace(self, item: T, name: str) -> T:
        """`item` under `name`, in place of what was registered under it: a user's object loaded again from its
        edited file."""
        self._items.pop(name, None)
        return self.register(item, name)

    def register_family(self, build: Callable[[str], T | None], form: str) -> None:
        self._families.append((build, form))

    def get(self, name: str) -> T:
        item = self._find(name)
        if item is None:
            raise InputError(f"unknown {self.axis} '{name}'; known: {', '.join(self.allowed())}")
        return item

    def __getitem__(self, name: str) -> T:
        """`MODELS["otflow"]`: as `get`, an unknown name an InputError that lists the known ones."""
        return self.get(name)

    def _find(self, name: str) -> T | None:
        if name in self._items:
            return self._items[name]
        return next((item for build, _ in self._families if (item := build(name)) is not None), None)

    def names(self) -> list[str]:
        return list(self._items)

    def allowed(self) -> list[str]:
        """The registered names, then the forms of the families (what an error message lists)."""
        return [*self._items, *(form for _, form in self._families)]

    def __iter__(self) -> Iterator[T]:
        return iter(self._items.values())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._find(name) is not None


class _WithDefaults:
    """An item that leaves out optional attributes of its protocol, read with their defaults; all else is its own."""

    def __init__(self, item: Any, optional: dict[str, Callable[[str], Any]]) -> None:
        self._item, self._optional = item, optional

    def __getattr__(self, attribute: str) -> Any:
        if attribute in self._optional and not hasattr(self._item, attribute):
            return self._optional[attribute](self._item.name)
        return getattr(self._item, attribute)


def unwrap(item: Any) -> Any:
    """The object registered, where a registry with defaults holds it inside its wrapper."""
    return item._item if isinstance(item, _WithDefaults) else item


def _declares(item: Any, attribute: str) -> bool:
    """Whether `item` has `attribute` of its own, without asking a `__getattr__` (a stand-in that loads on demand)."""
    return attribute in getattr(item, "__dict__", {}) or any(attribute in vars(c) for c in type(item).__mro__)


class RegistryWithDefaults(Registry[T]):
    """A registry whose items each have every attribute of their protocol: an item (a plug-in's) that leaves out an
    optional one reads it as `optional[attribute](item.name)`."""

    def __init__(self, axis: str, optional: dict[str, Callable[[str], Any]]) -> None:
        super().__init__(axis)
        self.optional = optional

    def register(self, item: T, name: str | None = None) -> T:
        complete = all(_declares(item, attribute) for attribute in self.optional)
        return super().register(item if complete else cast(T, _WithDefaults(item, self.optional)), name)
