"""An actor inbox for agents: packets by reference, and who waits for them.

pykka lets implementors of actor types supply the inbox, through the documented hook
``Actor._create_actor_inbox()``, as anything that has pykka's ``ActorInbox`` protocol
(``put``, ``get``, ``empty``). The pykka runtime's actors use an :class:`AgentInbox`:
pykka's own messages (stop requests) go through ``put`` as usual; the runtime
appends packets straight to :attr:`AgentInbox.packets` (one reference per recipient,
no envelope per copy) and ``get`` hands the actor loop one wake-up letter for all of
them. The inbox also knows whether its thread waits for a message, which lets the
runtime hand wake-ups on from one agent to the next.

What ``get`` returns has the two fields pykka's actor loop reads of an envelope,
``message`` and ``reply_to``; pykka's own ``Envelope`` class is internal, so the inbox
makes its letters itself. (Before this inbox, the runtime built pykka's envelopes and
read ``threading.Condition._waiters`` to see who waited; an envelope per copy cost
about 10% more CPU in the benchmark's chat rounds.)
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

from megaactors.core.messages import Packet

__all__ = ["PACKETS", "AgentInbox"]


class _Letter:
    """What the actor loop reads from an inbox (pykka's loop reads ``message`` and
    ``reply_to`` of what ``get`` returns)."""

    __slots__ = ("message", "reply_to")

    def __init__(self, message: Any) -> None:
        self.message = message
        self.reply_to = None


PACKETS = object()
"""The message of the letter that tells an actor packets wait in its inbox."""
_WAKE = _Letter(PACKETS)
"""The letter that tells an actor packets wait in its inbox."""


class AgentInbox:
    """An actor's inbox (pykka's ``ActorInbox`` protocol) holding packets for its
    agent, which knows whether its thread waits for a message."""

    __slots__ = ("announced", "control", "flagged", "mutex", "packets", "ready", "waiting")

    def __init__(self) -> None:
        self.mutex = threading.Lock()
        self.ready = threading.Condition(self.mutex)
        self.control: deque[Any] = deque()
        """pykka's own envelopes (stop requests), first come first served."""
        self.packets: list[Packet] = []
        """Packets for the agent, in arrival order (appended under :attr:`mutex`)."""
        self.waiting = False
        """The actor's thread waits in :meth:`get` and nobody has woken it yet."""
        self.flagged = False
        """It was put in line to be woken since it began waiting."""
        self.announced = False
        """A wake-up letter went out for the packets waiting (until they are taken)."""

    def put(self, envelope: Any, /) -> None:
        with self.mutex:
            self.control.append(envelope)
            self.ready.notify()

    def get(self) -> Any:
        with self.mutex:
            while not self.control and (not self.packets or self.announced):
                self.waiting = True
                self.ready.wait()
            self.waiting = self.flagged = False
            if self.control:
                return self.control.popleft()
            self.announced = True
            return _WAKE

    def empty(self) -> bool:
        return not self.control and (not self.packets or self.announced)

    def take(self) -> list[Packet]:
        """Every packet waiting, in arrival order."""
        with self.mutex:
            packets, self.packets = self.packets, []
            self.announced = False
        return packets

    def wake(self) -> bool:
        """Wake the actor if it waits for a message and one has arrived."""
        with self.mutex:
            if not self.waiting or not self.packets or self.announced:  # woken already, or busy
                return False
            self.waiting = False
            self.ready.notify()
            return True
