"""``megaactors run``: one chat-round run, summarised or as JSON."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from megaactors.cli.common import CommandError, add_param, add_run_options, spec_from_args
from megaactors.cli.durable_common import add_durable_options, check_budget, run_checkpointed
from megaactors.cli.endpoint import add_endpoint_options, endpoint_client
from megaactors.cli.shards import add_shard_options, run_sharded, sharding
from megaactors.experiments.collector import CollectorError, DataCollector, check_output_path
from megaactors.experiments.spec import RunSpec
from megaactors.validation import Param

__all__ = ["COLLECT", "COLLECT_EVERY", "TIME_SCALE", "TRACE_AGENTS", "TRACE_OUT", "format_summary", "register"]

COLLECT = Param(
    "collect",
    str,
    "write the run's series per super-step to this file (.csv or .parquet; the agents' beside it as NAME.agents.EXT)",
)
COLLECT_EVERY = Param(
    "collect_every",
    int,
    "with --collect: collect every N events instead of every super-step (--step-seconds)",
    minimum=1,
    maximum=10**12,
)

TRACE_OUT = Param(
    "trace_out",
    str,
    "write the run as a Trace Event file (JSON) that Perfetto and chrome://tracing open: agents' states, LLM and "
    "tool calls, messages as arrows",
)
TRACE_AGENTS = Param(
    "trace_agents",
    int,
    "with --trace-out: draw at most this many agents (whole groups first)",
    minimum=1,
    maximum=100_000,
)

TIME_SCALE = Param(
    "time_scale",
    float,
    "live runtimes: wall seconds per virtual second (default: the runtime's)",
    minimum=0,
    above_minimum=True,
    maximum=1e6,
)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "run",
        help="run a behaviour (the chat round by default) on an organisation and report its cost",
        description="Run one behaviour on one organisation and report messages, bytes, tokens, dollars and time. "
        "--behaviour names the agent logic (megaactors behaviours lists what is installed; package.module:Class "
        "runs your own) and --behaviour-param KEY=VALUE sets its constructor's parameters.",
    )
    add_run_options(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_param(p, TIME_SCALE)
    add_param(p, COLLECT)
    add_param(p, COLLECT_EVERY)
    add_param(p, TRACE_OUT)
    add_param(p, TRACE_AGENTS, default=200)
    add_durable_options(p, with_store=True)
    add_endpoint_options(p)
    add_shard_options(p)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    spec = spec_from_args(args)
    check_budget(args, [spec])
    client = endpoint_client(args, spec)  # --endpoint and its options checked whatever runs
    if sharding(args):
        summary = run_sharded(args, spec)
    elif client is not None:
        if args.trace_out is not None or args.collect is not None or args.db or args.run_id:
            raise CommandError("--endpoint runs live: it does not combine with --trace-out, --collect or --checkpoint")
        scale = args.time_scale if args.time_scale is not None else 1.0  # virtual seconds are wall seconds
        summary = spec.execute(client, time_scale=scale).summary()
    elif args.trace_out is not None:
        summary = run_traced(args, spec)
    elif args.collect is not None or args.collect_every is not None:
        summary = run_collected(args, spec)
    elif args.db or args.run_id:
        from megaactors.cli.resume import print_summary

        return print_summary(run_checkpointed(args, spec), args.json)
    else:
        options: dict[str, Any] = {}
        if args.time_scale is not None:
            options["time_scale"] = args.time_scale  # a RuntimeOptions field: runtimes in virtual time ignore it
        summary = spec.execute(**options).summary()
    summary = with_status(summary)
    print(json.dumps(summary, sort_keys=True) if args.json else format_summary(summary))
    return 0


def with_status(summary: dict[str, Any]) -> dict[str, Any]:
    """``summary`` with ``status`` (``ok`` or ``stalled``), ``faults`` (counts by kind)
    and ``stalled`` (agent -> what it waits for), empty for a run without a network."""
    summary.setdefault("status", "ok")
    summary.setdefault("faults", {})
    summary.setdefault("stalled", {})
    return summary


def run_collected(args: argparse.Namespace, spec: RunSpec) -> dict[str, Any]:
    """``--collect``: step the run in the simulation, collecting its series, and write
    them; bad settings are checked before anything runs."""
    if args.collect is None:
        raise CommandError("--collect-every needs --collect PATH")
    if args.db or args.run_id:
        raise CommandError("--collect does not combine with --checkpoint/--run-id")
    if spec.runtime != "sim":
        raise CommandError(f"--collect steps the run in the simulation; got --runtime {spec.runtime}")
    try:
        check_output_path(args.collect)
        collector = DataCollector(step_s=args.step_seconds, every_events=args.collect_every)
    except CollectorError as exc:
        raise CommandError(str(exc)) from exc
    runtime = spec.build()
    collector.run(runtime)
    result = runtime.result()
    result.params = spec.result_params()
    for path in collector.save(args.collect):
        print(f"wrote {path}", file=sys.stderr)
    return result.summary()


def run_traced(args: argparse.Namespace, spec: RunSpec) -> dict[str, Any]:
    """``--trace-out``: run in the simulation with every transition traced and write
    the Trace Event file; bad settings are checked before anything runs."""
    from dataclasses import replace

    from megaactors.experiments.trace_events import TraceRecorder, write_trace_events

    if args.db or args.run_id or args.collect is not None:
        raise CommandError("--trace-out does not combine with --checkpoint/--run-id or --collect")
    if spec.runtime != "sim":
        raise CommandError(f"--trace-out records the run in the simulation; got --runtime {spec.runtime}")
    out = Path(args.trace_out)
    if not out.parent.is_dir():
        raise CommandError(f"--trace-out: no directory {out.parent}")
    recorder = TraceRecorder()
    runtime = replace(spec, trace=True).build(observer=recorder)
    recorder.clock = lambda: runtime.now
    result = runtime.run()
    result.params = spec.result_params()
    counts = write_trace_events(out, runtime.org, runtime.trace, recorder, max_agents=args.trace_agents)
    left = f", {counts['agents_left_out']:,} agents left out" if counts["agents_left_out"] else ""
    print(f"wrote {out}: {counts['agents']:,} agents, {counts['flows']:,} messages{left}", file=sys.stderr)
    return result.summary()


def format_summary(s: dict[str, Any]) -> str:
    """A readable multi-line summary of a run."""
    by_channel = ", ".join(f"{k} {v:,}" for k, v in s["messages_by_channel"].items() if v)
    behaviour = s.get("behaviour", "chat-round")
    params = s.get("behaviour_params") or {}
    what = behaviour + (" (" + ", ".join(f"{k}={v!r}" for k, v in params.items()) + ")" if params else "")
    model = s["model"]
    if s.get("price_in") is not None:
        model += f" at ${s['price_in']:,.2f} in / ${s['price_out']:,.2f} out per M tokens"
    lines = [
        f"{s['topology']} organisation: {s['agents']:,} agents in {s['groups']:,} groups, {s['levels']} level(s)"
        f" — {s['rounds']} round(s) of {what} on the {s['runtime']} runtime, seed {s['seed']}",
        f"  messages      {s['messages']:,}" + (f" ({by_channel})" if by_channel else ""),
        f"  bytes         {s['bytes']:,}",
        f"  LLM calls     {s['llm_calls']:,} in {s['batches']:,} batches",
        f"  tokens        {s['tokens_in']:,} in / {s['tokens_out']:,} out",
        f"  cost          ${s['cost_usd']:.4f} ({model})",
        f"  makespan      {s['virtual_time_s']:.2f} s virtual, {s['wall_s']:.3f} s wall",
        f"  peak queue    {s['peak_queue_depth']:,} messages",
    ]
    if s.get("rate_limited") or s.get("retries") or s.get("failed_llm_calls"):
        lines.append(
            f"  provider      {s['rate_limited']:,} rate-limited, {s['llm_errors']:,} errors, "
            f"{s['llm_timeouts']:,} timeouts; {s['retries']:,} retries ({s['llm_wait_s']:.1f} s backing off), "
            f"{s['failed_llm_calls']:,} failed calls"
        )
    faults = {kind: n for kind, n in s.get("faults", {}).items() if n}
    if faults or s.get("status", "ok") != "ok":
        lines.append(f"  status        {s['status']}")
        lines.append("  faults        " + (", ".join(f"{kind} {n:,}" for kind, n in faults.items()) or "none"))
    stalled = list(s.get("stalled", {}).items())
    for agent, waits in stalled[:5]:
        lines.append(f"  stalled       agent {agent} waits for {waits}")
    if len(stalled) > 5:
        lines.append(f"  stalled       ... and {len(stalled) - 5:,} more agent(s)")
    asked = s.get("interrupts", [])
    if asked:
        agent, reason = asked[0]
        more = f" (and {len(asked) - 1:,} more)" if len(asked) > 1 else ""
        lines.append(f"  interrupts    agent {agent}: {reason}{more}; not stopped: only a run with --checkpoint stops")
    return "\n".join(lines)
