"""What every sub-command shares: one-line errors with exit code 2, run options."""

from __future__ import annotations

import argparse
import sys
from typing import Any, NoReturn

from megaactors.experiments.spec import TOPOLOGIES, ParameterError, RunSpec
from megaactors.runtime import RUNTIMES

__all__ = ["CommandError", "Parser", "add_run_options", "spec_from_args"]


class CommandError(Exception):
    """Bad input on the command line: printed as one line, exit code 2."""


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line and exit with code 2."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(2)


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """Options that describe one run (a :class:`RunSpec`)."""
    d = RunSpec()
    parser.add_argument("--topology", default=d.topology, help=f"one of {', '.join(TOPOLOGIES)} (default %(default)s)")
    parser.add_argument("--agents", "-n", type=int, default=d.agents, help="number of agents N (default %(default)s)")
    parser.add_argument(
        "--group-size", "-g", type=int, default=d.group_size, help="two-tier group size (default %(default)s)"
    )
    parser.add_argument(
        "--fanout", "-k", type=int, default=d.fanout, help="hierarchy fan-out, >= 2 (default %(default)s)"
    )
    parser.add_argument("--rounds", "-r", type=int, default=d.rounds, help="chat rounds (default %(default)s)")
    parser.add_argument("--seed", "-s", type=int, default=d.seed, help="random seed (default %(default)s)")
    parser.add_argument("--runtime", default=d.runtime, help=f"one of {', '.join(RUNTIMES)} (default %(default)s)")
    parser.add_argument("--model", default=d.model, help="priced LLM model (default %(default)s)")
    parser.add_argument("--serial", action="store_true", help="one agent Processing at a time (w/o parallelism)")
    parser.add_argument("--max-concurrent-llm", type=int, default=None, help="cap on LLM calls in flight")
    parser.add_argument("--message-bytes", type=int, default=d.message_bytes, help="payload text per message")
    parser.add_argument("--latency-median", type=float, default=d.latency_median_s, help="median LLM latency, seconds")
    parser.add_argument("--latency-sigma", type=float, default=d.latency_sigma, help="lognormal sigma of LLM latency")
    parser.add_argument("--output-tokens", type=int, default=d.output_tokens, help="tokens per LLM reply")


def spec_from_args(args: argparse.Namespace, **extra: Any) -> RunSpec:
    """The :class:`RunSpec` the options describe; bad values raise :class:`CommandError`."""
    try:
        return RunSpec(
            topology=args.topology,
            agents=args.agents,
            group_size=args.group_size,
            fanout=args.fanout,
            rounds=args.rounds,
            seed=args.seed,
            runtime=args.runtime,
            model=args.model,
            serial=args.serial,
            max_concurrent_llm=args.max_concurrent_llm,
            message_bytes=args.message_bytes,
            latency_median_s=args.latency_median,
            latency_sigma=args.latency_sigma,
            output_tokens=args.output_tokens,
            **extra,
        )
    except ParameterError as exc:
        raise CommandError(str(exc)) from exc
