"""A real LLM endpoint on the command line: ``--endpoint URL`` (an OpenAI-compatible
server), its model name, where its key is, streaming, and ``--call-log PATH``.

``megaactors run --runtime asyncio --endpoint URL`` runs the behaviour against the
endpoint instead of the simulated LLM (through
:class:`~megaactors.providers.chat_completions.ChatCompletionsClient`, at
``time_scale`` 1 unless given); ``--call-log`` appends one JSON line per attempt,
what ``megaactors calibrate`` reads. The simulated provider's limits and failures
(``--rpm``, ``--tpm``, ``--llm-failure-rate``, ``--llm-timeout-s``) shape the
simulated LLM only and are refused with an endpoint: a real server has its own; so
are ``--faults`` (a run against a real server is not a fault experiment);
``--max-retries`` and ``--max-concurrent-llm`` apply to the client.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from megaactors.cli.common import CommandError, add_param
from megaactors.validation import Param

if TYPE_CHECKING:
    from megaactors.experiments.spec import RunSpec
    from megaactors.providers.chat_completions import ChatCompletionsClient

__all__ = [
    "CALL_LOG",
    "ENDPOINT",
    "ENDPOINT_KEY_ENV",
    "ENDPOINT_MODEL",
    "ENDPOINT_STREAM",
    "add_endpoint_options",
    "endpoint_client",
]

ENDPOINT = Param(
    "endpoint",
    str,
    "a real OpenAI-compatible endpoint (base URL, e.g. http://127.0.0.1:8000/v1) instead of the simulated LLM; "
    "needs --runtime asyncio",
)
ENDPOINT_MODEL = Param("endpoint_model", str, "with --endpoint: the model name sent to it (default: --model)")
ENDPOINT_KEY_ENV = Param(
    "endpoint_key_env", str, "with --endpoint: the environment variable holding its API key (none if unset)"
)
ENDPOINT_STREAM = Param(
    "endpoint_stream", bool, "with --endpoint: ask for streamed answers (the call log then has ttft_s)"
)
CALL_LOG = Param(
    "call_log",
    str,
    "with --endpoint: append one JSON line per attempt (ts, latency_s, input_tokens, output_tokens, status, model) "
    "to this file, for megaactors calibrate",
)


def add_endpoint_options(parser: argparse.ArgumentParser) -> None:
    """``--endpoint``, ``--endpoint-model``, ``--endpoint-key-env``, ``--endpoint-stream`` and ``--call-log``."""
    for p in (ENDPOINT, ENDPOINT_MODEL, ENDPOINT_KEY_ENV, ENDPOINT_STREAM, CALL_LOG):
        add_param(parser, p)


def endpoint_client(args: argparse.Namespace, spec: RunSpec) -> ChatCompletionsClient | None:
    """The client ``--endpoint`` asks for (None: the simulated LLM); what does not fit
    with it is a :class:`~megaactors.cli.common.CommandError`, before anything runs."""
    if args.endpoint is None:
        given = [p.name for p in (ENDPOINT_MODEL, ENDPOINT_KEY_ENV, ENDPOINT_STREAM, CALL_LOG)]
        extra = [f"--{name.replace('_', '-')}" for name in given if getattr(args, name) is not None]
        if extra:
            raise CommandError(f"{', '.join(extra)} need(s) --endpoint URL (a real endpoint)")
        return None
    if spec.runtime != "asyncio":
        raise CommandError(f"--endpoint needs --runtime asyncio (an LLM that is awaited); got --runtime {spec.runtime}")
    faults = spec.fault_spec()
    if spec.provider().active or (faults is not None and faults.active):
        raise CommandError(
            "--rpm, --tpm, --llm-failure-rate, --llm-timeout-s and --faults shape the simulated LLM and network; "
            "a real endpoint has its own limits: leave them out with --endpoint"
        )
    key = None
    if args.endpoint_key_env is not None:
        key = os.environ.get(args.endpoint_key_env)
        if not key:
            raise CommandError(f"--endpoint-key-env {args.endpoint_key_env}: that environment variable is not set")
    log = None
    if args.call_log is not None:
        log = Path(args.call_log)
        if log.exists() and not log.is_file():
            raise CommandError(f"--call-log {log}: not a regular file")
        if not log.parent.is_dir():
            raise CommandError(f"--call-log {log}: directory {log.parent} does not exist")
    from megaactors.core.llm import TokenModel
    from megaactors.errors import ParameterError
    from megaactors.providers.chat_completions import ChatCompletionsClient

    options: dict[str, Any] = {"max_retries": spec.max_retries, "jitter_seed": spec.seed, "call_log": log,
                               "stream": bool(args.endpoint_stream)}  # fmt: skip
    if spec.max_concurrent_llm is not None:
        options["max_concurrency"] = spec.max_concurrent_llm
    try:
        return ChatCompletionsClient(
            args.endpoint,
            args.endpoint_model or spec.model,
            api_key=key,
            tokens=TokenModel(output_tokens=spec.output_tokens),
            price=spec.prices(),
            **options,
        )
    except ParameterError as exc:
        raise CommandError(f"--endpoint: {exc}") from None
