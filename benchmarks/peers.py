#!/usr/bin/env python3
"""The two-tier chat round written plainly in SimPy and in Mesa's discrete-event
simulator, against the simulation runtime, in one process, taking turns.

Every agent composes its message (one LLM call of seeded lognormal latency), sends
it to every peer (its group; an admin also every other admin), and then, whenever
messages are waiting and it is not busy, takes them all and reads them (one LLM call
each batch) until it has read one message from every peer. The peer versions are
written as their documentation teaches: in SimPy a process per agent and a
``simpy.Store`` per in-queue; in Mesa an ``Agent`` per agent and events scheduled on
a ``DEVSimulator``. Each peer runs twice: counting messages only, and also counting
the bytes of each message's msgpack encoding as the simulation does. Message and LLM
call counts are checked equal to the simulation's.

    python benchmarks/peers.py [--agents 10000] [--repeat 3] [--json]

Needs the ``peers`` extra (``pip install -e '.[peers]'``).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from collections.abc import Callable
from typing import Any

import mesa
import msgpack
import simpy
from mesa.experimental.devs import DEVSimulator

from megaactors import ChatRound, Organisation, SimRuntime
from megaactors.behaviours.chat_round import mesh_channels
from megaactors.runtime.gc_tuning import paused_gc

TEXT = ChatRound().text  # the simulation's 200-byte message


def optimal_group_size(n: int) -> int:
    return max(2, round((2 * n) ** (1 / 3)))


def latency(rng: random.Random) -> float:
    """The simulation's default model: median 1 s, sigma 0.5, 60 output tokens at 0.02 s."""
    return math.exp(0.5 * rng.gauss(0.0, 1.0)) + 60 * 0.02


def peer_lists(org: Organisation) -> list[list[tuple[str, list[int]]]]:
    return [[(ch, list(ps)) for ch, ps in mesh_channels(org, a)] for a in range(org.n)]


class Counter:
    """What a peer version counts: messages, LLM calls and (optionally) bytes."""

    def __init__(self, count_bytes: bool) -> None:
        self.count_bytes = count_bytes
        self.messages = self.calls = self.bytes = 0

    def message(self, mid: int, sender: int, recipient: int, channel: str, now: float) -> tuple[Any, ...]:
        msg = (mid, sender, recipient, channel, "chat", [0, TEXT], None, now)
        self.messages += 1
        if self.count_bytes:
            self.bytes += len(msgpack.packb(msg))
        return msg


# ---------------------------------------------------------------------- SimPy


def run_simpy(org: Organisation, peers: list[Any], count_bytes: bool, seed: int = 0) -> Counter:
    env = simpy.Environment()
    rng = random.Random(seed)
    counter = Counter(count_bytes)
    stores = [simpy.Store(env) for _ in range(org.n)]

    def agent(a: int) -> Any:
        expected = sum(len(p) for _, p in peers[a])
        counter.calls += 1
        yield env.timeout(latency(rng))  # compose
        for channel, recipients in peers[a]:
            for r in recipients:
                stores[r].put(counter.message(counter.messages, a, r, channel, env.now))
        got = 0
        while got < expected:
            first = yield stores[a].get()  # wait for a message, then take all that wait
            batch = [first, *stores[a].items]
            stores[a].items.clear()
            got += len(batch)
            counter.calls += 1
            yield env.timeout(latency(rng))  # read the batch

    for a in range(org.n):
        if peers[a]:
            env.process(agent(a))
    env.run()
    return counter


# ---------------------------------------------------------------------- Mesa


def run_mesa(org: Organisation, peers: list[Any], count_bytes: bool, seed: int = 0) -> Counter:
    counter = Counter(count_bytes)

    class ChatAgent(mesa.Agent):
        def __init__(self, model: mesa.Model, channels: list[tuple[str, list[int]]]) -> None:
            super().__init__(model)
            self.channels = channels
            self.expected = sum(len(p) for _, p in channels)
            self.inbox: list[Any] = []
            self.got = 0
            self.busy = True

        def call_llm(self, then: Callable[[], None]) -> None:
            counter.calls += 1
            self.busy = True
            self.model.simulator.schedule_event_relative(then, latency(self.model.rng_latency))

        def start(self) -> None:
            self.call_llm(self.send)

        def send(self) -> None:
            agents, now = self.model.chat_agents, self.model.simulator.time
            for channel, recipients in self.channels:
                for r in recipients:
                    agents[r].receive(counter.message(counter.messages, self.unique_id, r, channel, now))
            self.next_batch()

        def receive(self, msg: Any) -> None:
            self.inbox.append(msg)
            if not self.busy:
                self.busy = True
                self.model.simulator.schedule_event_relative(self.next_batch, 0)

        def next_batch(self) -> None:
            if not self.inbox or self.got >= self.expected:
                self.busy = False
                return
            batch, self.inbox = self.inbox, []
            self.got += len(batch)
            self.call_llm(self.next_batch)

    class ChatModel(mesa.Model):
        def __init__(self) -> None:
            super().__init__(seed=seed)
            self.rng_latency = random.Random(seed)
            self.simulator = DEVSimulator()
            self.simulator.setup(self)
            self.chat_agents = [ChatAgent(self, peers[a]) for a in range(org.n)]
            for agent in self.chat_agents:
                if agent.channels:
                    self.simulator.schedule_event_now(agent.start)

    model = ChatModel()
    model.simulator.run_until(math.inf)
    return counter


# ---------------------------------------------------------------------- the simulation


def run_sim(org: Organisation) -> Counter:
    result = SimRuntime(org, ChatRound(), trace=False).run()
    counter = Counter(True)
    ledger = result.ledger
    counter.messages, counter.calls, counter.bytes = ledger.messages, ledger.llm_calls, ledger.bytes
    return counter


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3, help="turns; the fastest run of each side is reported")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    n = args.agents
    org = Organisation.two_tier(n, optimal_group_size(n))
    peers = peer_lists(org)
    sides: dict[str, Callable[[], Counter]] = {
        "simulation": lambda: run_sim(org),
        "simpy": lambda: run_simpy(org, peers, False),
        "simpy+bytes": lambda: run_simpy(org, peers, True),
        "mesa": lambda: run_mesa(org, peers, False),
        "mesa+bytes": lambda: run_mesa(org, peers, True),
    }
    best: dict[str, float] = {}
    counts: dict[str, tuple[int, int]] = {}
    for _ in range(args.repeat):
        for name, side in sides.items():
            with paused_gc():  # every side under the same collector settings
                t0 = time.perf_counter()
                c = side()
                wall = time.perf_counter() - t0
            best[name] = min(best.get(name, math.inf), wall)
            counts[name] = (c.messages, c.calls)
    reference = counts["simulation"]
    for name, (messages, _) in counts.items():
        if messages != reference[0]:
            raise SystemExit(f"{name} delivered {messages:,} messages, the simulation {reference[0]:,}")
    rows = [
        {
            "side": name,
            "wall_s": round(wall, 3),
            "messages": counts[name][0],
            "llm_calls": counts[name][1],
            "simulation_speedup": round(wall / best["simulation"], 2),
        }
        for name, wall in best.items()
    ]
    if args.json:
        print(json.dumps({"agents": n, "group_size": optimal_group_size(n), "rows": rows}))
        return
    g, runs = optimal_group_size(n), args.repeat
    print(f"two-tier chat round, N = {n:,}, G = {g}, {reference[0]:,} messages; fastest of {runs} turns")
    for row in rows:
        print(
            f"  {row['side']:<12} {row['wall_s']:8.3f} s  {row['llm_calls']:>9,} LLM calls"
            f"  simulation {row['simulation_speedup']:.2f}x faster"
        )


if __name__ == "__main__":
    main()
