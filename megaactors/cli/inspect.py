"""``megaactors inspect``: a checkpointed run's agents at its newest checkpoint (a
sharded run's from every machine's state)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from megaactors.cli.common import CommandError
from megaactors.cli.durable_common import add_store_option, open_for, run_id, table

__all__ = ["AGENT_COLUMNS", "register"]

AGENT_COLUMNS = ("agent", "phase", "queued", "llm_calls", "tokens_in", "tokens_out", "cost_usd", "state")


def register(sub: Any) -> None:
    p = sub.add_parser(
        "inspect",
        help="show a checkpointed run's agents: phase, in-queue, behaviour state, costs so far",
        description="Rebuild a run at its newest checkpoint (an interrupted run: where it stopped) and show each "
        "agent's phase, in-queue depth, behaviour state and costs so far.",
    )
    add_store_option(p)
    p.add_argument("--run-id", required=True, type=run_id, help="the run to inspect")
    p.add_argument("--agents", type=int, default=50, metavar="N", help="show the first N agents (default 50)")
    p.add_argument("--json", action="store_true", help="print one JSON object (every agent)")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from megaactors.durable.checkpointing import restored
    from megaactors.durable.sharded import restored_machines

    if args.agents < 1:
        raise CommandError(f"--agents must be at least 1, got {args.agents}")
    with open_for(args.db, readonly=True) as store:
        run = store.get_run(args.run_id)
        latest = store.latest(args.run_id)
        if latest is None:
            raise CommandError(f"run {args.run_id!r} has no checkpoint yet")
        if run.options.get("shards") is None:
            rt = restored(store, args.run_id, latest.step)
            sims, machine_of = {0: rt}, [0] * rt.org.n
        else:  # a sharded run: each machine's simulation holds its own agents
            sims, machine_of = restored_machines(store, args.run_id, latest.step)
    costs = {m: {row["agent"]: row for row in sim.ledger.agent_rows(sim.org)} for m, sim in sims.items()}
    agents = []
    for aid, m in enumerate(machine_of):
        sim, row = sims[m], costs[m].get(aid, {})
        a = sim.agents[aid]
        agents.append({
            "agent": aid, "phase": a.phase.name, "queued": sim.queued(aid), "llm_calls": row.get("llm_calls", 0),
            "tokens_in": row.get("tokens_in", 0), "tokens_out": row.get("tokens_out", 0),
            "cost_usd": row.get("cost_usd", 0.0), "state": a.data,
        })  # fmt: skip
    now = max(sim.now for sim in sims.values())
    messages = sum(sim.ledger.messages for sim in sims.values())
    cost_usd = sum(sim.ledger.cost_usd for sim in sims.values())
    head = {"run": run.run_id, "status": run.status, "step": latest.step, "virtual_time_s": now,
            "reason": run.error, "messages": messages, "cost_usd": cost_usd}  # fmt: skip
    if len(sims) > 1:
        head["shards"] = run.options["shards"]
    if args.json:
        print(json.dumps({**head, "agents": agents}, sort_keys=True, default=str))
        return 0
    why = f" — {run.error}" if run.error else ""
    where = f"window {latest.step} on {head['shards']} shard(s)" if "shards" in head else f"super-step {latest.step}"
    print(f"run {run.run_id}: {run.status} at {where}, {now:g} s virtual; "
          f"{messages:,} messages, ${cost_usd:.4f} so far{why}")  # fmt: skip
    print(table(agents[: args.agents], AGENT_COLUMNS))
    if len(agents) > args.agents:
        print(f"... {len(agents) - args.agents:,} more agents (--agents N, or --json for all)")
    return 0
