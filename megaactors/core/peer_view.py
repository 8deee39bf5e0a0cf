"""A read-only view of a member list less one member: the recipients of a broadcast
to a whole group (or to every other admin) without a list of them per send.

An organisation hands one out for a send to its sender's group
(:meth:`~megaactors.core.organisation.Organisation.group_peers_view`), the postman
recognises it as a broadcast from its fields alone, and the packet keeps it as its
recipients.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence
from itertools import chain, islice
from typing import overload

__all__ = ["Without", "member_position", "without"]


class Without(Sequence[int]):
    """The first ``size`` ids of ``members`` but the one at position ``skip``: the
    recipients of a broadcast (a group or the admins less the sender) in a few
    bytes instead of a list of them all. ``members`` only ever grows at its end."""

    __slots__ = ("members", "size", "skip")

    def __init__(self, members: list[int], skip: int, size: int) -> None:
        self.members = members
        self.skip = skip
        self.size = size

    def __len__(self) -> int:
        return self.size - 1

    @overload
    def __getitem__(self, index: int) -> int: ...
    @overload
    def __getitem__(self, index: slice) -> list[int]: ...
    def __getitem__(self, index: int | slice) -> int | list[int]:
        if isinstance(index, slice):
            start, stop, step = index.indices(self.size - 1)
            if step != 1:
                return self.as_list()[index]
            members, skip = self.members, self.skip  # positions from skip on are one further
            head = members[start : min(stop, skip)] if start < skip else []
            return head + members[max(start, skip) + 1 : stop + 1] if stop > skip else head
        count = self.size - 1
        if index < 0:
            index += count
        if not 0 <= index < count:
            raise IndexError("recipient index out of range")
        return self.members[index + (index >= self.skip)]

    def __iter__(self) -> Iterator[int]:
        members, skip = self.members, self.skip
        return chain(islice(members, skip), islice(members, skip + 1, self.size))

    def as_list(self) -> list[int]:
        members, skip = self.members, self.skip
        return members[:skip] + members[skip + 1 : self.size]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Without):
            other = other.as_list()
        return isinstance(other, (list, tuple)) and self.as_list() == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Without({self.as_list()!r})"


_new = object.__new__


def without(members: list[int], skip: int, size: int) -> Without:
    """``Without(members, skip, size)``, made without calling the class (on CPython
    3.11 a class whose ``__init__`` is Python code costs about 3,000 machine
    instructions a call, this a fraction of that): one per broadcast."""
    view = _new(Without)
    view.members, view.skip, view.size = members, skip, size
    return view


def member_position(members: list[int], a: int) -> int:
    """Where ``a`` is in ``members``, guessed from consecutive or sorted ids first."""
    i = a - members[0]
    if 0 <= i < len(members) and members[i] == a:
        return i
    i = bisect_left(members, a)
    if i < len(members) and members[i] == a:
        return i
    return members.index(a)
