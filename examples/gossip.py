"""Gossip averaging: agents agree on the mean of their numbers, talking only to neighbours.

Every agent starts with a number drawn from the run's seed. Each round it sends its
number to everyone it may message; once it has read the numbers of everyone who
messages it for that round, it asks its LLM to combine them (one call) and takes
the average of its own number and theirs. On a connected undirected graph the
numbers converge to a common value; ``spread`` in each agent's state shows how far
apart they still are.

Run it (from this folder, or with it on PYTHONPATH)::

    megaactors run --behaviour gossip:Gossip --topology small-world --agents 200 --degree 4 \\
        --behaviour-param rounds=8
"""

from __future__ import annotations

from bisect import insort
from typing import Any

from megaactors import AgentContext, Batch, Effects, LLMReply, LLMRequest, Organisation, Send
from megaactors.core.llm import stream_uniform

__all__ = ["Gossip"]


class Gossip:
    """Gossip averaging: each round every agent averages its number with its neighbours'."""

    name = "gossip"
    version = "1"

    def __init__(self, rounds: int = 5, seed: int = 0) -> None:
        if rounds < 1:
            raise ValueError(f"rounds must be >= 1, got {rounds}")
        self.rounds = rounds
        self.seed = seed

    def init(self, agent: int, org: Organisation) -> dict[str, Any]:
        value = round(100 * stream_uniform(self.seed, agent, 0, stream=0x6057), 6)
        # heard[r]: the numbers of round r read so far (a list per round: msgpack-ready)
        return {"value": value, "round": 0, "heard": [], "expect": org.in_degree(agent), "start": value}

    def on_start(self, ctx: AgentContext, state: dict[str, Any]) -> Effects | None:
        if not ctx.org.contacts(ctx.agent):
            return None
        return self._send(ctx, state)

    def on_batch(self, ctx: AgentContext, state: dict[str, Any], batch: Batch) -> Effects:
        heard = state["heard"]
        for message in batch:
            r, value = message.payload
            while len(heard) <= r:
                heard.append([])
            insort(heard[r], value)  # kept sorted: the same state whatever the arrival order
        return Effects(llm=LLMRequest(stage="combine"))  # reads the numbers just taken

    def on_reply(self, ctx: AgentContext, state: dict[str, Any], reply: LLMReply) -> Effects:
        sends: list[Send] = []
        heard = state["heard"]
        # every round whose numbers are all in (a fast neighbour's next round may be in already)
        while 0 < (r := state["round"]) <= self.rounds and len(heard) >= r and len(heard[r - 1]) == state["expect"] > 0:
            numbers = sorted([state["value"], *heard[r - 1]])
            state["value"] = round(sum(numbers) / len(numbers), 9)
            heard[r - 1] = []  # read: the state stays small
            if r == self.rounds:
                state["round"] = r + 1
                break
            sends += self._send(ctx, state).sends
        return Effects(sends=sends)

    def _send(self, ctx: AgentContext, state: dict[str, Any]) -> Effects:
        r = state["round"]
        state["round"] = r + 1
        payload = [r, state["value"]]
        return Effects(
            sends=[Send(peers, channel, "number", payload) for channel, peers in ctx.org.contacts(ctx.agent)]
        )


def spread(states: list[dict[str, Any]]) -> float:
    """Largest minus smallest number over agents that took part."""
    values = [s["value"] for s in states if s["round"]]
    return max(values) - min(values) if values else 0.0
