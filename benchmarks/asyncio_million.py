#!/usr/bin/env python3
"""The AgentScope comparison: a million agents on the asyncio runtime.

Every one of N agents (default 1,000,000, two-tier, group size G = 126, the size
that minimises messages) makes a simulated LLM call of exactly ``latency`` seconds
(default 1 s, really waited: time scale 1), sends one two-tier chat round (every
member to every other member of its group, every admin also to every other admin:
188 million messages for a million agents), reads everything it was sent, then
makes a second call. Measured, each in a fresh process tree:

* ``runtime``: the asyncio runtime in one process on uvloop, with timers coalesced
  into ``--tick`` second ticks; wall time from building the organisation to the
  result;
* ``runtime-ray``: the same run sharded over ``--shards`` Ray actors (default: one
  per core) on a local Ray instance of ``--shards`` CPUs, started first and not
  timed (``ray_start_s`` says how long it took); wall time from building the
  organisation to the merged result; the process tree measured includes Ray's own
  processes (GCS, raylet, agents, idle workers);
* ``calls-only``: the same agents making the same two calls without the chat round,
  in one process (what AgentScope's million-agent run does: one dummy call per agent);
* ``baseline``: bare asyncio, ``--shards`` forked processes each running its share
  of N coroutines that just ``await asyncio.sleep(latency)`` twice, on the same
  event loop kind;
* ``baseline-coalesced``: the same, with the sleeps coalesced into ticks as the
  runtime does (one shared future per tick).

Peak memory is the peak of the summed resident set sizes of the process tree,
sampled every 50 ms (pages shared between the forked processes are counted in each,
so this overstates what the machine spent), and the peak of the summed
proportional set sizes (shared pages divided among their sharers), sampled every
second (reading it costs the kernel a walk of every page table). Targets: under
40 s wall and 6 GB.

    python benchmarks/asyncio_million.py [--agents 1000000] [--shards 2] [--skip PARTS] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from megaactors import Effects, LatencyModel, LLMRequest, Organisation, Send, SimulatedLLM
from megaactors.behaviours.chat_round import mesh_degree
from megaactors.core.behaviour import NOTHING
from megaactors.core.messages import ADMIN, INTRA
from megaactors.runtime import AsyncioRuntime
from megaactors.runtime.aio import new_event_loop
from megaactors.runtime.gc_tuning import quiet_gc

TEXT = "Status update: my part of the task is progressing; here are my findings. " * 3


class ChatOnce:
    """Compose (one LLM call), chat to every peer once, read it all (one LLM call)."""

    name = "chat-once"

    def __init__(self, chat: bool = True) -> None:
        self.chat = chat
        self.compose = Effects(llm=LLMRequest(new_tokens=0, stage="compose"))
        self.read = LLMRequest(stage="read")

    def init(self, agent: int, org: Organisation) -> int:
        return 0

    def on_start(self, ctx: Any, state: int) -> Effects:
        return self.compose

    def on_reply(self, ctx: Any, state: int, reply: Any) -> Effects:
        if reply.call_index:
            return NOTHING
        if not self.chat:
            return Effects(llm=LLMRequest(new_tokens=0, stage="read"))
        org, a = ctx.org, ctx.agent
        sends = [Send(org.group_peers(a), INTRA, "chat", [0, TEXT])]
        if org.admin_group[a] >= 0:
            sends.append(Send(org.admin_peers(a), ADMIN, "chat", [0, TEXT]))
        return Effects(state=mesh_degree(org, a), sends=sends)

    def on_batch(self, ctx: Any, state: int, batch: Any) -> Effects:
        left = state - len(batch)
        return Effects(state=left) if left else Effects(state=0, llm=self.read)


# ---------------------------------------------------------------------- workers (one process tree each)


def work_on_ray(args: argparse.Namespace) -> dict[str, Any]:
    from megaactors.runtime.ray_cluster import ray_session

    t0 = time.perf_counter()
    with ray_session(num_cpus=args.shards):
        started = time.perf_counter() - t0
        return {**work_runtime(args, chat=True, shards=args.shards), "ray_start_s": round(started, 2)}


def work_runtime(args: argparse.Namespace, chat: bool, shards: int = 1) -> dict[str, Any]:
    t0 = time.perf_counter()
    org = Organisation.two_tier(args.agents, args.group_size)
    runtime = AsyncioRuntime(
        org,
        ChatOnce(chat),
        SimulatedLLM(latency=LatencyModel(median_s=args.latency_s, sigma=0.0, per_output_token_s=0.0)),
        time_scale=1.0,
        trace=False,
        event_loop=args.event_loop,
        timer_tick_s=args.tick,
        shards=shards,
    )
    result = runtime.run()
    wall = time.perf_counter() - t0
    led = result.ledger
    return {
        "wall_s": round(wall, 2),
        "run_s": round(led.wall_s, 2),
        "agents_busy_s": round(led.virtual_time_s, 2),
        "messages": led.messages,
        "bytes": led.bytes,
        "llm_calls": led.llm_calls,
        "batches": sum(led.per_agent["batches"]),
    }


async def _sleepers(count: int, latency: float, tick: float) -> None:
    loop = asyncio.get_running_loop()
    buckets: dict[int, asyncio.Future[None]] = {}

    def coalesced(delay: float) -> asyncio.Future[None]:
        key = math.ceil((time.monotonic() + delay) / tick)
        fut = buckets.get(key)
        if fut is None:
            fut = buckets[key] = loop.create_future()
            loop.call_later(key * tick - time.monotonic(), fut.set_result, None)
        return fut

    async def agent() -> None:
        if tick:
            await coalesced(latency)
            await coalesced(latency)
        else:
            await asyncio.sleep(latency)
            await asyncio.sleep(latency)

    await asyncio.gather(*(agent() for _ in range(count)))


def _baseline_shard(count: int, latency: float, loop_kind: str, tick: float) -> None:
    with asyncio.Runner(loop_factory=lambda: new_event_loop(loop_kind)) as runner:
        runner.run(_sleepers(count, latency, tick))


def work_baseline(args: argparse.Namespace, tick: float) -> dict[str, Any]:
    t0 = time.perf_counter()
    with quiet_gc():
        mp = multiprocessing.get_context("fork")
        sizes = [args.agents // args.shards + (k < args.agents % args.shards) for k in range(args.shards)]
        procs = [mp.Process(target=_baseline_shard, args=(n, args.latency_s, args.event_loop, tick)) for n in sizes]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
    return {"wall_s": round(time.perf_counter() - t0, 2), "exit_codes": [p.exitcode for p in procs]}


# ---------------------------------------------------------------------- measuring a process tree


def _tree(root: int) -> list[int]:
    """``root`` and its descendants."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, ()))
    return found


def _field_kb(path: str, field: str) -> int:
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


_PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


def _rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * _PAGE_KB
    except (OSError, ValueError, IndexError):
        return 0


def measure(what: str, args: argparse.Namespace) -> dict[str, Any]:
    """Run one part in a fresh process tree, sampling its memory: the summed RSS
    every 50 ms (the tree is listed again every 0.5 s), the summed PSS every second
    (reading it makes the kernel walk every page table: too dear to do often)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", what, *_forwarded(args)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    peak_rss = peak_pss = 0
    samples = 0
    pids = [proc.pid]
    while proc.poll() is None:
        if samples % 10 == 0:
            pids = _tree(proc.pid)
        peak_rss = max(peak_rss, sum(map(_rss_kb, pids)))
        if samples % 20 == 0:
            peak_pss = max(peak_pss, sum(_field_kb(f"/proc/{pid}/smaps_rollup", "Pss:") for pid in pids))
        samples += 1
        time.sleep(0.05)
    out = proc.stdout.read() if proc.stdout else ""
    if proc.returncode != 0:
        raise SystemExit(f"the {what} run failed with exit code {proc.returncode}")
    return {**json.loads(out), "peak_rss_gb": round(peak_rss / 2**20, 2), "peak_pss_gb": round(peak_pss / 2**20, 2)}


def _forwarded(args: argparse.Namespace) -> list[str]:
    return [
        f"--agents={args.agents}",
        f"--group-size={args.group_size}",
        f"--shards={args.shards}",
        f"--latency-s={args.latency_s}",
        f"--tick={args.tick}",
        f"--event-loop={args.event_loop}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", type=int, default=1_000_000)
    parser.add_argument("--group-size", type=int, default=126)
    parser.add_argument("--shards", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--latency-s", type=float, default=1.0)
    parser.add_argument("--tick", type=float, default=0.01, help="timer coalescing tick, seconds (0: off)")
    parser.add_argument("--event-loop", default="auto")
    parser.add_argument(
        "--skip",
        default="",
        help="comma-separated parts to skip: baseline,baseline-coalesced,calls-only,runtime,runtime-ray",
    )
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        work = {
            "runtime": lambda: work_runtime(args, chat=True),
            "runtime-ray": lambda: work_on_ray(args),
            "calls-only": lambda: work_runtime(args, chat=False),
            "baseline": lambda: work_baseline(args, tick=0.0),
            "baseline-coalesced": lambda: work_baseline(args, tick=args.tick),
        }[args.worker]
        print(json.dumps(work()))
        return
    skip = set(filter(None, args.skip.split(",")))
    report: dict[str, Any] = {
        "agents": args.agents,
        "group_size": args.group_size,
        "shards": args.shards,
        "latency_s": args.latency_s,
        "tick_s": args.tick,
    }
    parts = ("baseline", "baseline-coalesced", "calls-only", "runtime", "runtime-ray")
    for what in parts:
        if what not in skip:
            report[what] = measure(what, args)
            if not args.json:
                print(f"{what:>10}: {report[what]}", flush=True)
    base = report.get("baseline", {}).get("wall_s")
    coalesced = report.get("baseline-coalesced", {}).get("wall_s")
    if "runtime" in report and "runtime-ray" in report:
        ray, one = report["runtime-ray"], report["runtime"]
        ray["wall_to_unsharded"] = round(ray["wall_s"] / one["wall_s"], 2)
        ray["rss_to_unsharded"] = round(ray["peak_rss_gb"] / one["peak_rss_gb"], 2)
    for what in ("calls-only", "runtime", "runtime-ray"):
        if what in report and base:
            report[what]["ratio_to_baseline"] = round(report[what]["wall_s"] / base, 2)
        if what in report and coalesced:
            report[what]["ratio_to_coalesced_baseline"] = round(report[what]["wall_s"] / coalesced, 2)
    if args.json:
        print(json.dumps(report))
        return

    def ratios(part: dict[str, Any]) -> str:
        text = []
        if base:
            text.append(f"{part['ratio_to_baseline']:.2f}x the bare asyncio baseline ({base:.1f} s)")
        if coalesced:
            text.append(f"{part['ratio_to_coalesced_baseline']:.2f}x the coalesced one ({coalesced:.1f} s)")
        return "; " + ", ".join(text) if text else ""

    if "runtime" in report:
        r = report["runtime"]
        print(
            f"{args.agents:,} agents, 2 x {args.latency_s:g} s LLM calls each + a two-tier chat round of "
            f"{r['messages']:,} messages, one process: {r['wall_s']:.1f} s wall, "
            f"peak RSS {r['peak_rss_gb']:.2f} GB / PSS {r['peak_pss_gb']:.2f} GB" + ratios(r)
        )
    if "runtime-ray" in report:
        r = report["runtime-ray"]
        print(
            f"the same run on {args.shards} Ray actors: {r['wall_s']:.1f} s wall (target < 40 s; "
            f"Ray started in {r['ray_start_s']:.1f} s before), peak RSS {r['peak_rss_gb']:.2f} GB / PSS "
            f"{r['peak_pss_gb']:.2f} GB (target < 6 GB)"
            + ratios(r)
            + (
                f"; {r['wall_to_unsharded']:.2f}x the wall and {r['rss_to_unsharded']:.2f}x the RSS of one process"
                if "wall_to_unsharded" in r
                else ""
            )
        )
    if "calls-only" in report:
        c = report["calls-only"]
        print(
            f"the same calls without the chat round: {c['wall_s']:.1f} s wall, "
            f"peak RSS {c['peak_rss_gb']:.2f} GB / PSS {c['peak_pss_gb']:.2f} GB" + ratios(c)
        )


if __name__ == "__main__":
    main()
