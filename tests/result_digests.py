"""Digests of results that must not change unless a change says so.

Each case runs one scenario and reduces its result to a SHA-256 of canonical JSON:
for the simulation, the whole summary (but ``wall_s``), the per-agent ledger rows,
the final states and the trace, float for float; for the live runtimes, what the
conformance suite holds them to (messages per channel, bytes, final states).
``python tests/result_digests.py --record`` rewrites ``tests/data/result_digests.json``
(only when a change is meant to alter results, and the commit must say so).
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sample_behaviours import GitUser, Recruiter, ToolLoop

from megaactors import ChatRound, LatencyModel, Organisation, SimulatedLLM
from megaactors.network import FaultSpec, NetworkModel
from megaactors.runtime import RUNTIMES

DIGESTS = Path(__file__).resolve().parent / "data" / "result_digests.json"


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=repr)


def _sha(value: Any) -> str:
    return hashlib.sha256(_canonical(value).encode()).hexdigest()


def sim_digest(result: Any) -> str:
    summary = {k: v for k, v in result.summary().items() if k != "wall_s"}
    trace = result.trace.as_dict() if result.trace is not None else None
    return _sha(
        {"summary": summary, "agents": result.ledger.agent_rows(result.org), "states": result.states, "trace": trace}
    )


def live_digest(result: Any) -> str:
    s = result.summary()
    return _sha(
        {
            "messages": s["messages"],
            "messages_by_channel": s["messages_by_channel"],
            "bytes": s["bytes"],
            "agents": s["agents"],
            "states": result.states,
        }
    )


ORGS: dict[str, Callable[[], Organisation]] = {
    "flat-9": lambda: Organisation.flat(9),
    "star-25": lambda: Organisation.star(25),
    "two-tier-120-g9": lambda: Organisation.two_tier(120, 9),
    "two-tier-boss-40-g6": lambda: Organisation.two_tier(40, 6, boss=True),
    "hierarchy-60-k3": lambda: Organisation.hierarchy(60, 3),
}


def _sim(org: Organisation, behaviour: Any, seed: int, **options: Any) -> Any:
    return RUNTIMES["sim"](org, behaviour, SimulatedLLM(seed=seed), seed=seed, trace=True, **options).run()


def cases() -> dict[str, Callable[[], str]]:
    out: dict[str, Callable[[], str]] = {}
    for name, make in ORGS.items():
        for seed in (1, 2):
            out[f"sim/chat2/{name}/s{seed}"] = lambda m=make, s=seed: sim_digest(_sim(m(), ChatRound(2), s))
        out[f"sim/chat2/{name}/serial"] = lambda m=make: sim_digest(_sim(m(), ChatRound(2), 3, serial=True))
        out[f"sim/chat2/{name}/cap3"] = lambda m=make: sim_digest(_sim(m(), ChatRound(2), 4, max_concurrent_llm=3))
    out["sim/chat3/two-tier-3000-g14"] = lambda: sim_digest(_sim(Organisation.two_tier(3000, 14), ChatRound(3), 8))
    out["sim/chat1/hierarchy-5000-k10"] = lambda: sim_digest(_sim(Organisation.hierarchy(5000, 10), ChatRound(1), 9))
    # larger runs (recorded from the code before channel logs), where broadcasts go through shared logs
    out["sim/chat2/two-tier-20000-g34/s5"] = lambda: sim_digest(_sim(Organisation.two_tier(20000, 34), ChatRound(2), 5))
    out["sim/chat2/two-tier-boss-2000-g16/s6"] = lambda: sim_digest(
        _sim(Organisation.two_tier(2000, 16, boss=True), ChatRound(2), 6)
    )
    out["sim/chat2/flat-300/s7"] = lambda: sim_digest(_sim(Organisation.flat(300), ChatRound(2), 7))
    # through a network (recorded from the code before network copies due within the
    # current event bucket went into a heap beside it): every copy is an event
    placed = NetworkModel({"intra": 0.01, "admin": 0.02}, 0.05, 0.002, machine_count=2)
    out["sim/net/two-tier-600-g8/machines2"] = lambda: sim_digest(
        _sim(Organisation.two_tier(600, 8), ChatRound(2), 2, network=placed)
    )
    slow = NetworkModel({"intra": 0.3, "hierarchy": 0.05}, 0.0, 0.2)
    out["sim/net/hierarchy-200-k4/jitter"] = lambda: sim_digest(
        _sim(Organisation.hierarchy(200, 4), ChatRound(2), 3, network=slow)
    )
    faulty = FaultSpec(drop=0.05, duplicate=0.05, delay=0.05, crash=0.02, restart_s=0.5, timeout_s=0.4)
    out["sim/net/two-tier-300-g7/faults"] = lambda: sim_digest(
        _sim(Organisation.two_tier(300, 7), ChatRound(2), 4, network=placed, faults=faulty)
    )
    out["sim/toolloop"] = lambda: sim_digest(_sim(Organisation.flat(6), ToolLoop(4), 5))
    out["sim/gituser"] = lambda: sim_digest(_sim(Organisation.flat(6), GitUser(), 6))
    out["sim/recruiter"] = lambda: sim_digest(_sim(Organisation.hierarchy(1, 3), Recruiter(), 7))

    def megaagent(name: str, variant: str) -> str:
        from megaactors.megaagent.scenarios import SCENARIOS

        result = SCENARIOS[name].variant(variant).run(seed=1, trace=True)
        return sim_digest(result)

    for variant in ("full", "no_parallelism", "no_hierarchy", "no_monitoring"):
        out[f"sim/megaagent/gobang/{variant}"] = lambda v=variant: megaagent("gobang", v)
    out["sim/megaagent/policy/full"] = lambda: megaagent("policy", "full")

    def live(runtime: str, make: Callable[[], Organisation], rounds: int) -> str:
        llm = SimulatedLLM(seed=1, latency=LatencyModel(median_s=1.0, sigma=0.5, per_output_token_s=0.0))
        result = RUNTIMES[runtime](make(), ChatRound(rounds), llm, seed=1, trace=False, time_scale=0.002).run()
        return live_digest(result)

    for runtime in ("asyncio", "pykka"):
        for name in ("two-tier-120-g9", "hierarchy-60-k3"):
            out[f"{runtime}/chat2/{name}"] = lambda r=runtime, m=ORGS[name]: live(r, m, 2)

    def step(make: Callable[[], Organisation], behaviour: Any, seed: int, **options: Any) -> str:
        # the step runtime runs on a virtual clock: its whole result is pinned, as the simulation's
        return sim_digest(RUNTIMES["step"](make(), behaviour, SimulatedLLM(seed=seed), seed=seed, **options).run())

    for name in ("two-tier-120-g9", "hierarchy-60-k3", "star-25"):
        out[f"step/chat2/{name}"] = lambda m=ORGS[name]: step(m, ChatRound(2), 1)
    boss = ORGS["two-tier-boss-40-g6"]
    out["step/chat2/two-tier-boss-40-g6/serial"] = lambda: step(boss, ChatRound(2), 3, serial=True)
    out["step/gituser"] = lambda: step(lambda: Organisation.flat(6), GitUser(), 6)
    return out


def compute() -> dict[str, str]:
    return {name: fn() for name, fn in cases().items()}


if __name__ == "__main__":
    if sys.argv[1:] != ["--record"]:
        sys.exit("usage: python tests/result_digests.py --record")
    DIGESTS.write_text(json.dumps(compute(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {DIGESTS}")
