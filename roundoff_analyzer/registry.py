"""One registry per sweep axis: name -> implementation, with a clear error for unknown names."""
from __future__ import annotations

from typing import Generic, Iterator, TypeVar

from .errors import InputError

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, axis: str) -> None:
        self.axis = axis
        self._items: dict[str, T] = {}

    def register(self, item: T, name: str | None = None) -> T:
        """Register `item` under its own `name`, or under `name` (a user's object named by where it lives)."""
        name = name or getattr(item, "name")
        if name in self._items:
            raise ValueError(f"{self.axis} '{name}' is registered twice")
        self._items[name] = item
        return item

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            raise InputError(
                f"unknown {self.axis} '{name}'; known: {', '.join(self.names())}"
            ) from None

    def names(self) -> list[str]:
        return list(self._items)

    def __iter__(self) -> Iterator[T]:
        return iter(self._items.values())

    def __contains__(self, name: object) -> bool:
        return name in self._items
