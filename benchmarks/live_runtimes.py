#!/usr/bin/env python3
"""Live runtimes against bare loops making the same deliveries, in the same run.

Workload: ``rounds`` two-tier chat rounds (every agent sends round ``r + 1`` once it
has read every round-``r`` message addressed to it) with zero-latency simulated LLM
calls, so that only the runtime's own work is timed.

* pykka: the pykka runtime (ledger, state machine, batches, one LLM call per batch)
  against bare pykka actors that ``tell`` the same messages to the same peers and
  count what they receive. Both are timed over the whole run, starting and stopping
  the actors included. Target: at most 1.15x the bare wall time. The bare loop runs
  under the interpreter settings the runtime gives itself (the collector quieted,
  the thread switch interval at ``SWITCH_INTERVAL``), so that only the runtime's
  own work differs, and on one CPU as the runtime's threads are (its default,
  ``one_cpu=True``); with ``--every-cpu`` both sides' threads may use every CPU.
* asyncio: the asyncio runtime against bare tasks with one ``asyncio.Queue`` each,
  ``put_nowait`` to the same peers and ``await get()`` of everything expected, on the
  same event loop kind. Target: at least 0.8x the bare throughput (messages/s).

    python benchmarks/live_runtimes.py [--pykka-agents 500] [--asyncio-agents 10000] [--rounds 3] [--repeat 5]
                                       [--every-cpu]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import pykka

from megaactors import ChatRound, LatencyModel, Organisation, SimulatedLLM
from megaactors.behaviours.chat_round import mesh_channels
from megaactors.runtime import AsyncioRuntime, PykkaRuntime
from megaactors.runtime.aio import new_event_loop
from megaactors.runtime.gc_tuning import quiet_gc
from megaactors.runtime.thread_limits import on_one_cpu
from megaactors.runtime.threads import SWITCH_INTERVAL, switch_interval

T = TypeVar("T")
U = TypeVar("U")

ZERO_LATENCY = LatencyModel(median_s=0.0, sigma=0.0, per_output_token_s=0.0)


def optimal_group_size(n: int) -> int:
    return max(2, round((2 * n) ** (1 / 3)))


def peers_of(org: Organisation) -> list[list[int]]:
    return [[p for _, ps in mesh_channels(org, a) for p in ps] for a in range(org.n)]


# ---------------------------------------------------------------------- pykka


class _BareActor(pykka.ThreadingActor):
    """Tells each round to its peers, the next one once it has received as many
    messages as it has sent rounds times its peers: the chat round's deliveries."""

    def __init__(self, peers: list[int], rounds: int, world: dict[str, Any]) -> None:
        super().__init__()
        self.peers = peers
        self.rounds = rounds
        self.world = world
        self.got = 0
        self.sent_rounds = 0
        self.started = False

    def _send_round(self) -> None:
        refs = self.world["refs"]
        payload = (self.sent_rounds, "x" * 200)
        self.sent_rounds += 1
        for r in self.peers:
            refs[r].tell(payload)

    def on_receive(self, message: Any) -> None:
        if message == "go":
            self.started = True
        else:
            self.got += 1
        while self.started and self.got >= len(self.peers) * self.sent_rounds:
            if self.sent_rounds == self.rounds:
                self._finished()
                return
            self._send_round()

    def _finished(self) -> None:
        with self.world["lock"]:
            self.world["left"] -= 1
            if not self.world["left"]:
                self.world["done"].set()


def bare_pykka(org: Organisation, rounds: int, one_cpu: bool = False) -> tuple[float, int]:
    peers = peers_of(org)
    with quiet_gc(), switch_interval(SWITCH_INTERVAL), on_one_cpu(one_cpu):
        t0 = time.perf_counter()
        world: dict[str, Any] = {"lock": threading.Lock(), "left": org.n, "done": threading.Event(), "refs": []}
        world["refs"] = [_BareActor.start(peers[a], rounds, world) for a in range(org.n)]
        for ref in world["refs"]:
            ref.tell("go")
        world["done"].wait()
        for fut in [ref.stop(block=False) for ref in world["refs"]]:
            fut.get()
        wall = time.perf_counter() - t0
    return wall, sum(len(p) for p in peers) * rounds


def best_of(runtime: Callable[[], T], bare: Callable[[], U], repeat: int) -> tuple[T, U]:
    """The fastest of ``repeat`` runs of each side, the two sides taking turns (so
    that a slow spell of a shared machine falls on both)."""
    runs = [(runtime(), bare()) for _ in range(repeat)]
    return min(r for r, _ in runs), min(b for _, b in runs)  # type: ignore[type-var]


def runtime_wall(cls: type, org: Organisation, rounds: int, **kw: Any) -> tuple[float, int, int]:
    """Wall time, messages and batches taken of one run."""
    t0 = time.perf_counter()
    result = cls(org, ChatRound(rounds), SimulatedLLM(latency=ZERO_LATENCY), trace=False, **kw).run()
    return time.perf_counter() - t0, result.ledger.messages, sum(result.ledger.per_agent["batches"])


# ---------------------------------------------------------------------- asyncio


async def _bare_agent(me: int, peers: list[int], queues: list[asyncio.Queue[Any]], rounds: int) -> None:
    queue = queues[me]
    for r in range(rounds):
        payload = (r, "x" * 200)
        for p in peers:
            queues[p].put_nowait(payload)
        for _ in range(len(peers)):
            await queue.get()


async def _bare_asyncio(peers: list[list[int]], rounds: int) -> None:
    queues: list[asyncio.Queue[Any]] = [asyncio.Queue() for _ in peers]
    await asyncio.gather(*(_bare_agent(a, peers[a], queues, rounds) for a in range(len(peers))))


def bare_asyncio(org: Organisation, rounds: int, loop_kind: str) -> tuple[float, int]:
    peers = peers_of(org)
    with quiet_gc(), asyncio.Runner(loop_factory=lambda: new_event_loop(loop_kind)) as runner:
        t0 = time.perf_counter()
        runner.run(_bare_asyncio(peers, rounds))
        wall = time.perf_counter() - t0
    return wall, sum(len(p) for p in peers) * rounds


# ---------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pykka-agents", type=int, default=500)
    parser.add_argument("--asyncio-agents", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--every-cpu", action="store_true", help="pykka: both sides' threads on every CPU (one_cpu=False)"
    )
    parser.add_argument("--repeat", type=int, default=5, help="runs per side, taking turns; the best is reported")
    parser.add_argument("--event-loop", default="auto", help="auto (uvloop if installed), uvloop or asyncio")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    report: dict[str, Any] = {}

    one_cpu = not args.every_cpu
    n = args.pykka_agents
    g = optimal_group_size(n)
    live, bare = best_of(
        lambda: runtime_wall(PykkaRuntime, Organisation.two_tier(n, g), args.rounds, one_cpu=one_cpu),
        lambda: bare_pykka(Organisation.two_tier(n, g), args.rounds, one_cpu),
        args.repeat,
    )
    assert live[1] == bare[1], (live, bare)
    report["pykka"] = {
        "agents": n,
        "messages": bare[1],
        "runtime_batches": live[2],
        "runtime_wall_s": round(live[0], 4),
        "bare_wall_s": round(bare[0], 4),
        "wall_ratio": round(live[0] / bare[0], 3),
        "one_cpu": one_cpu,
        "target": "<= 1.15",
    }

    n = args.asyncio_agents
    g = optimal_group_size(n)
    live, bare = best_of(
        lambda: runtime_wall(AsyncioRuntime, Organisation.two_tier(n, g), args.rounds, event_loop=args.event_loop),
        lambda: bare_asyncio(Organisation.two_tier(n, g), args.rounds, args.event_loop),
        args.repeat,
    )
    assert live[1] == bare[1], (live, bare)
    report["asyncio"] = {
        "agents": n,
        "messages": bare[1],
        "runtime_batches": live[2],
        "event_loop": type(new_event_loop(args.event_loop)).__module__.split(".")[0],
        "runtime_msgs_per_s": round(live[1] / live[0]),
        "bare_msgs_per_s": round(bare[1] / bare[0]),
        "throughput_ratio": round(bare[0] / live[0], 3),
        "target": ">= 0.8",
    }
    if args.json:
        print(json.dumps(report))
        return
    p, a = report["pykka"], report["asyncio"]
    print(
        f"pykka   N={p['agents']:,} {args.rounds} rounds, {p['messages']:,} messages:"
        f" runtime {p['runtime_wall_s']:.3f} s ({p['runtime_batches']:,} batches),"
        f" bare tell loop {p['bare_wall_s']:.3f} s"
        f" -> {p['wall_ratio']:.2f}x wall (target <= 1.15x)"
    )
    print(
        f"asyncio N={a['agents']:,} {args.rounds} rounds, {a['messages']:,} messages on {a['event_loop']}: runtime"
        f" {a['runtime_msgs_per_s']:,} msg/s ({a['runtime_batches']:,} batches), bare asyncio.Queue loop"
        f" {a['bare_msgs_per_s']:,} msg/s"
        f" -> {a['throughput_ratio']:.2f}x throughput (target >= 0.8x)"
    )


if __name__ == "__main__":
    main()
