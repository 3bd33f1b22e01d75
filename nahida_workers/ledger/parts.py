"""Composition for the ledger adapters: a ledger is built from small parts.

Each adapter (``sql.py``, ``memory.py``) holds its parts as attributes (an
inbox part, a records part, a reads part, ...) and exposes their methods
with :class:`forward`, so a caller sees one object implementing every
ledger port of :mod:`nahida_workers.ports` while no class inherits another's
methods.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

__all__ = ["forward"]

P = ParamSpec("P")
R = TypeVar("R")
PartT = TypeVar("PartT")


class forward(Generic[PartT, P, R]):
    """A method of the ledger that is its part's method, bound at attribute access.

    ``get_session = forward("reads", SqlReads.get_session)`` makes
    ``ledger.get_session`` the bound ``ledger.reads.get_session``, with its
    signature and docstring (so type checkers and protocols see it).

    Args:
        part: the attribute of the ledger holding the part.
        method: the part class's method (its name is looked up on the part).
    """

    def __init__(self, part: str, method: Callable[Concatenate[PartT, P], R]) -> None:
        self._part = part
        self._name = method.__name__
        self.__doc__ = method.__doc__

    @overload
    def __get__(self, obj: None, owner: type[Any]) -> forward[PartT, P, R]: ...

    @overload
    def __get__(self, obj: object, owner: type[Any] | None = None) -> Callable[P, R]: ...

    def __get__(self, obj: object | None, owner: type[Any] | None = None) -> Any:
        if obj is None:
            return self
        return getattr(getattr(obj, self._part), self._name)
