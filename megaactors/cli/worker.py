"""``megaactors worker``: claim queued runs and run them, checkpointing as they go."""

from __future__ import annotations

import argparse
from typing import Any

from megaactors.cli.common import add_param
from megaactors.cli.durable_common import add_budget_options, add_lease_option, add_store_option, open_for
from megaactors.experiments.budget import Budget
from megaactors.validation import Param

__all__ = ["JOBS", "MAX_RUNS", "METRICS_PORT", "POLL", "register"]

JOBS = Param("jobs", int, "worker processes to start", minimum=1, maximum=1024, short="-j")
POLL = Param("poll", float, "pause when the queue is empty", unit="s", minimum=0, above_minimum=True, maximum=3600)
MAX_RUNS = Param("max_runs", int, "stop after finishing this many runs", minimum=1, maximum=10**9)
METRICS_PORT = Param(
    "metrics_port",
    int,
    "serve Prometheus metrics at http://127.0.0.1:PORT/metrics (with --jobs N, worker i on PORT+i)",
    minimum=1,
    maximum=65535,
)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "worker",
        help="claim queued runs under a lease and run them (start several at once)",
        description="Claim runs of this megaactors version under a lease renewed by heartbeat, checkpoint every "
        "run's super-steps and finish it. A run whose worker died is resumed from its newest checkpoint once its "
        "lease expires. A run with bad parameters or over the budget (--max-agents, --max-messages, this "
        "machine's memory) is dead-lettered at once, unstarted, with the reason. Worker processes end with "
        "this one.",
    )
    add_store_option(p)
    add_lease_option(p)
    add_param(p, JOBS, default=1)
    add_param(p, POLL, default=0.5)
    p.add_argument("--exit-when-idle", action="store_true", help="stop once no run is queued or running")
    add_param(p, MAX_RUNS)
    add_budget_options(p)
    add_param(p, METRICS_PORT)
    p.add_argument("--log-format", choices=("text", "json"), default="text", help="log lines as text or JSON objects")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from megaactors.durable.metrics import WorkerMetrics, check_ports_free
    from megaactors.durable.runqueue import retry_busy
    from megaactors.durable.worker import log_to_stderr, work, work_in_processes

    kwargs: dict[str, Any] = {
        "lease_s": args.lease,
        "poll_s": args.poll,
        "exit_when_idle": args.exit_when_idle,
        "max_runs": args.max_runs,
        "budget": Budget.machine(args.max_agents, args.max_messages),
    }
    with retry_busy(lambda: open_for(args.db)) as store:  # a server restarting as the worker starts is waited for
        if args.jobs == 1:
            metrics = None
            if args.metrics_port is not None:
                metrics = WorkerMetrics(store)
                server = metrics.serve(args.metrics_port)
            try:
                work(store, log=log_to_stderr(args.log_format), metrics=metrics, **kwargs)
            finally:
                if metrics is not None:
                    server.shutdown()
            return 0
    if args.metrics_port is not None:
        check_ports_free(args.metrics_port, args.jobs)
    work_in_processes(args.db, args.jobs, log_format=args.log_format, metrics_port=args.metrics_port, **kwargs)
    return 0
