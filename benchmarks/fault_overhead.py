#!/usr/bin/env python3
"""What a network with faults costs the simulation, against the same run without.

For each N, a two-tier chat round (group size G = round((2N)^(1/3))) runs on the
simulation without a network and through one with ``--faults`` (default: 1 % of
copies dropped, recovery on: each lost copy sent again after its timeout); the two
take turns, ``--repeat`` times each, and the best wall time of each is compared.
Every copy then goes through a seeded decision and an arrival event, so this is the
price of the per-copy path, not of the few re-sends.

    python benchmarks/fault_overhead.py [--agents 10000,100000] [--repeat 3] [--faults drop=0.01]
"""

from __future__ import annotations

import argparse
import json
import time

from megaactors import ChatRound, Organisation, SimRuntime
from megaactors.network import parse_faults


def timed(n: int, faults: str | None) -> tuple[float, dict[str, int], int]:
    g = max(2, round((2 * n) ** (1 / 3)))
    options = {} if faults is None else {"faults": parse_faults(faults)}
    runtime = SimRuntime(Organisation.two_tier(n, g), ChatRound(), trace=False, **options)
    t0 = time.perf_counter()
    result = runtime.run()
    return time.perf_counter() - t0, result.faults or {}, result.ledger.messages


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", default="10000,100000")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--faults", default="drop=0.01")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    report = {}
    for n in (int(x) for x in args.agents.split(",")):
        plain, faulty = [], []
        for _ in range(args.repeat):  # sides take turns
            plain.append(timed(n, None)[0])
            wall, counts, messages = timed(n, args.faults)
            faulty.append(wall)
        report[str(n)] = {
            "messages": messages,
            "plain_s": min(plain),
            "faults_s": min(faulty),
            "ratio": min(faulty) / min(plain),
            "faults": {k: v for k, v in counts.items() if v},
        }
        if not args.json:
            r = report[str(n)]
            print(
                f"N={n:>8,}  messages {messages:>12,}  plain {r['plain_s']:.3f} s  with {args.faults} "
                f"{r['faults_s']:.3f} s  ratio {r['ratio']:.2f}  faults {r['faults']}"
            )
    if args.json:
        print(json.dumps(report, sort_keys=True))


if __name__ == "__main__":
    main()
