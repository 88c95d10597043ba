"""Bounded process-wide tables: loaded MAX models, the compile log, the profile.

A long-running process (a server compiling many shapes, a notebook) must not
grow without bound. Models are kept in least-recently-used order up to
``Settings.max_cached_graphs``; a model a live compiled graph still calls is
never evicted (evicting it would free nothing and make the next compile of
the same structure load it again), and is not counted against the bound until
its last compiled graph is gone. The compile log and the profile table keep
the latest ``max_cached_graphs`` entries.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict, deque
from collections.abc import Hashable, Iterator
from typing import Generic, TypeVar

from ..settings import Settings

T = TypeVar("T")

DEFAULT_CAPACITY = Settings.max_cached_graphs


class Hold:
    """Keeps one entry of a ModelTable while referenced."""

    __slots__ = ("__weakref__", "key")

    def __init__(self, key: Hashable) -> None:
        self.key = key


class ModelTable(Generic[T]):
    """An LRU of values by key whose entries in use by a live owner are kept."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[Hashable, T] = OrderedDict()
        self._owners: dict[Hashable, int] = {}
        self._lock = threading.RLock()
        self.evicted = 0

    def get(self, key: Hashable) -> T | None:
        with self._lock:
            value = self._entries.get(key)
            if value is not None:
                self._entries.move_to_end(key)
            return value

    def put(self, key: Hashable, value: T, *, held: bool = False) -> None:
        """Add an entry; ``held``: the caller holds it at once (``hold`` with
        ``already_counted``), so it does not count against the bound."""
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            if held:
                self._owners[key] = self._owners.get(key, 0) + 1
            self._trim()

    def hold(self, key: Hashable, *, already_counted: bool = False) -> Hold:
        """A token keeping ``key`` in the table for as long as it lives.

        A compiled graph keeps the token in its attributes, which Dynamo's
        wrappers copy: the entry is held while any copy lives.
        """
        token = Hold(key)
        with self._lock:
            if key in self._entries:
                if not already_counted:
                    self._owners[key] = self._owners.get(key, 0) + 1
                weakref.finalize(token, self._release, key)
        return token

    def _release(self, key: Hashable) -> None:
        with self._lock:
            left = self._owners.get(key, 0) - 1
            if left > 0:
                self._owners[key] = left
            else:
                self._owners.pop(key, None)
            self._trim()

    def resize(self, capacity: int) -> None:
        with self._lock:
            self.capacity = capacity
            self._trim()

    def _trim(self) -> None:
        unheld = [k for k in self._entries if k not in self._owners]
        for key in unheld[: max(0, len(unheld) - self.capacity)]:
            del self._entries[key]
            self.evicted += 1

    def held(self) -> int:
        """Entries a live owner still uses."""
        with self._lock:
            return sum(1 for k in self._entries if k in self._owners)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __iter__(self) -> Iterator[Hashable]:
        return iter(list(self._entries))

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._owners.clear()


class BoundedLog(Generic[T]):
    """The latest entries of a process-wide record, at most ``capacity``."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self._items: deque[T] = deque(maxlen=capacity)
        self._lock = threading.Lock()

    @property
    def capacity(self) -> int:
        return self._items.maxlen or 0

    def append(self, item: T) -> None:
        with self._lock:
            self._items.append(item)

    def resize(self, capacity: int) -> None:
        with self._lock:
            if capacity != self._items.maxlen:
                self._items = deque(self._items, maxlen=capacity)

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[T]:
        return iter(list(self._items))

    def __getitem__(self, index: int | slice) -> T | list[T]:
        return list(self._items)[index]

    def __bool__(self) -> bool:
        return bool(self._items)
