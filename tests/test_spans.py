"""OpenTelemetry spans of a durable run (run → super-step → LLM call), recorded with
the SDK's in-memory exporter; the command line exports them when
``OTEL_TRACES_EXPORTER`` says so; without a provider nothing is recorded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from megaactors import RunSpec, __version__
from megaactors.durable import DurableOptions, MemoryStore, run_durable


def test_a_durable_run_s_spans_nest_run_super_step_llm_call() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    spec = RunSpec(topology="two-tier", agents=40, group_size=8, rounds=2, seed=5)
    store = MemoryStore()
    lease = store.create_run("r", spec.as_dict(), {}, version=__version__, owner="w", lease_s=30)
    assert lease is not None
    result = run_durable(store, lease, spec, DurableOptions(step_s=0.5), tracer=provider.get_tracer("test"))
    spans = exporter.get_finished_spans()
    (run,) = [s for s in spans if s.name == "run"]
    steps = [s for s in spans if s.name == "super-step"]
    calls = [s for s in spans if s.name == "llm call"]
    assert run.attributes["megaactors.run_id"] == "r" and run.attributes["megaactors.param.agents"] == 40
    assert steps and all(s.parent.span_id == run.context.span_id for s in steps)
    step_ids = {s.context.span_id for s in steps}
    assert len(calls) == result.ledger.llm_calls and all(c.parent.span_id in step_ids for c in calls)
    assert sum(c.attributes["megaactors.cost_usd"] for c in calls) == pytest.approx(result.ledger.cost_usd)
    assert [s.attributes["megaactors.step"] for s in steps] == list(range(len(steps)))  # 0 is the start
    other = MemoryStore()
    lease = other.create_run("r", spec.as_dict(), {}, version=__version__, owner="w", lease_s=30)
    assert lease is not None
    untraced = run_durable(other, lease, spec, DurableOptions(step_s=0.5))
    assert untraced.summary() | {"wall_s": 0} == result.summary() | {"wall_s": 0}  # spans change nothing


def test_the_command_line_exports_spans_as_the_environment_says(tmp_path: Path) -> None:
    env = {**os.environ, "OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "chaos-lab"}
    out = subprocess.run(
        [sys.executable, "-m", "megaactors", "run", "--agents", "20", "--group-size", "5", "--checkpoint",
         str(tmp_path / "r.db"), "--run-id", "r", "--json"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    summary, _, exported = out.stdout.partition("\n")
    assert json.loads(summary)["agents"] == 20
    names = [json.loads(chunk)["name"] for chunk in _objects(exported)]
    assert names.count("run") == 1 and "super-step" in names and "llm call" in names
    assert '"service.name": "chaos-lab"' in exported


def _objects(text: str) -> list[str]:
    """The JSON objects the console exporter prints one after another."""
    decoder, found, i = json.JSONDecoder(), [], 0
    while (i := text.find("{", i)) != -1:
        _, end = decoder.raw_decode(text, i)
        found.append(text[i:end])
        i = end
    return found
