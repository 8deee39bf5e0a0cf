#!/usr/bin/env python3
"""What simulating a provider's rate limit costs: wall time per completed LLM call with
an RPM limit binding on about half the calls, against the same run without limits.

A two-tier chat round of N agents (groups of 10) runs without limits (the baseline,
measured in the same process), then under the RPM limit at which 429s number about
half the completed calls (found by bisection on the deterministic outcome; TPM
unlimited, default retry policy). The two sides take turns ``--repeat`` times; the
best of each is reported. Also run with a provider model that sets nothing (limits
off), which takes the plain path.

    python benchmarks/rate_limits.py [--agents 10000] [--repeat 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import time

from megaactors import ChatRound, Organisation, SimulatedLLM
from megaactors.providers.limits import ProviderModel
from megaactors.runtime.sim import SimRuntime


def run(n: int, provider: ProviderModel | None) -> tuple[float, int, int]:
    """Wall seconds, completed calls and 429s of one run."""
    rt = SimRuntime(Organisation.two_tier(n, 10), ChatRound(), SimulatedLLM(seed=1), seed=1, provider=provider,
                    trace=False)  # fmt: skip
    t0 = time.perf_counter()
    led = rt.run().ledger
    return time.perf_counter() - t0, led.llm_calls, led.rate_limited


def binding_rpm(n: int, calls: int, target: float = 0.5) -> float:
    """The RPM at which 429s are about ``target`` × the completed calls: lowered from
    the unlimited run's call count (never binding: the bucket holds a minute's worth)
    in steps of 10 % until it binds that much, then bisected (a lower limit binds more,
    and costs more to simulate, so the search never goes far below)."""
    high, low = float(calls), float(calls)
    while True:
        _, done, limited = run(n, ProviderModel(rpm=low, seed=1))
        if limited > target * done:
            break
        high, low = low, low * 0.9
    while high / low > 1.01:
        mid = (low + high) / 2
        _, done, limited = run(n, ProviderModel(rpm=mid, seed=1))
        if limited > target * done:
            low = mid
        else:
            high = mid
    return high


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    n = args.agents
    rpm = binding_rpm(n, run(n, None)[1])
    sides = {"unlimited": None, "limits off": ProviderModel(seed=1), "rpm binding": ProviderModel(rpm=rpm, seed=1)}
    best: dict[str, tuple[float, int, int]] = {}
    for _ in range(args.repeat):
        for name, provider in sides.items():
            got = run(n, provider)
            if name not in best or got[0] < best[name][0]:
                best[name] = got
    base_wall, base_calls, _ = best["unlimited"]
    report: dict[str, object] = {"agents": n, "rpm": round(rpm, 1)}
    for name, (wall, calls, limited) in best.items():
        per_call_ratio = (wall / calls) / (base_wall / base_calls)
        report[name] = {"wall_s": round(wall, 3), "llm_calls": calls, "rate_limited": limited,
                        "wall_per_call_ratio": round(per_call_ratio, 3)}  # fmt: skip
        if not args.json:
            print(f"{name:>12}: {wall:7.3f} s, {calls:,} calls, {limited:,} 429s, "
                  f"wall per completed call {per_call_ratio:.3f}x the unlimited run")  # fmt: skip
    if args.json:
        print(json.dumps(report))
    else:
        print(f"rpm {rpm:,.1f} (429s about half the completed calls)")


if __name__ == "__main__":
    main()
