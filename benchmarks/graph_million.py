#!/usr/bin/env python3
"""A million-node scale-free organisation and one chat round in the simulation.

Measured, each in a fresh process that reports its wall time, CPU time and peak
resident memory (the kernel's high-water mark):

* ``build``: generating the Barabási–Albert graph (``--degree`` M = 3 edges per new
  node, seeded) with numpy and building the organisation's compressed edge arrays;
* ``run``: the same build, then one chat round on the sim runtime (one message along
  every directed edge: 2 M (N − M) messages, checked against the ledger);
* ``networkx``: ``networkx.barabasi_albert_graph`` for the same model at ``--nx-agents``
  (default 100,000; it holds a dict per node and per edge), beside ``build`` at the
  same size, as the reason the families are generated without it;
* ``baseline``: a process that imports megaactors and does nothing (the floor of
  every peak above).

Goal: the run at a million agents within 2.5 GB.

    python benchmarks/graph_million.py [--agents 1000000] [--degree 3] [--nx-agents 100000] [--json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = """
import json, resource, sys, time
params = json.loads(sys.argv[1])
t0, c0 = time.perf_counter(), time.process_time()
out = {}
import megaactors
if params["what"] in ("build", "run"):
    from megaactors import ChatRound, Organisation, SimRuntime, SimulatedLLM
    org = Organisation.generated("scale-free", params["agents"], params["degree"], seed=1)
    out["build_s"] = time.perf_counter() - t0
    out["edges"] = org.graph.edge_count
    out["edge_bytes"] = org.graph.nbytes
    if params["what"] == "run":
        t1 = time.perf_counter()
        result = SimRuntime(org, ChatRound(1), SimulatedLLM(seed=1), seed=1, trace=False).run()
        out["run_s"] = time.perf_counter() - t1
        out["messages"] = result.ledger.messages
        out["llm_calls"] = result.ledger.llm_calls
elif params["what"] == "networkx":
    import networkx as nx
    g = nx.barabasi_albert_graph(params["agents"], int(params["degree"]), seed=1)
    out["edges"] = 2 * g.number_of_edges()
out["wall_s"] = time.perf_counter() - t0
out["cpu_s"] = time.process_time() - c0
out["peak_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps(out))
"""


def measure(what: str, agents: int = 0, degree: float = 3) -> dict[str, float]:
    params = json.dumps({"what": what, "agents": agents, "degree": degree})
    out = subprocess.run([sys.executable, "-c", CHILD, params], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", type=int, default=1_000_000)
    parser.add_argument("--degree", type=int, default=3)
    parser.add_argument("--nx-agents", type=int, default=100_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    n, m = args.agents, args.degree
    figures = {
        "baseline": measure("baseline"),
        "build": measure("build", n, m),
        "run": measure("run", n, m),
        "build_small": measure("build", args.nx_agents, m),
        "networkx_small": measure("networkx", args.nx_agents, m),
    }
    run = figures["run"]
    assert run["messages"] == run["edges"] == 2 * m * (n - m), run
    if args.json:
        print(json.dumps(figures, sort_keys=True))
        return
    gb = 1e9
    base = figures["baseline"]["peak_bytes"]
    print(f"scale-free organisation, N = {n:,}, M = {m}: {run['edges']:,} directed edges")
    b = figures["build"]
    print(f"  build       {b['build_s']:.1f} s wall, {b['cpu_s']:.1f} s CPU, peak {b['peak_bytes'] / gb:.2f} GB "
          f"(edge arrays {b['edge_bytes'] / 1e6:.0f} MB)")  # fmt: skip
    print(f"  chat round  {run['run_s']:.1f} s wall, {run['messages']:,} messages, {run['llm_calls']:,} LLM calls")
    print(f"  build + run {run['wall_s']:.1f} s wall, {run['cpu_s']:.1f} s CPU, peak {run['peak_bytes'] / gb:.2f} GB "
          f"({(run['peak_bytes'] - base) / n:,.0f} bytes per agent above the bare process's "
          f"{base / gb:.2f} GB); goal 2.5 GB: {'met' if run['peak_bytes'] <= 2.5 * gb else 'NOT met'}")  # fmt: skip
    small, nx_ = figures["build_small"], figures["networkx_small"]
    print(f"  at N = {args.nx_agents:,}: numpy {small['cpu_s']:.2f} s CPU, peak {small['peak_bytes'] / gb:.2f} GB; "
          f"networkx {nx_['cpu_s']:.2f} s CPU, peak {nx_['peak_bytes'] / gb:.2f} GB "
          f"({nx_['cpu_s'] / small['cpu_s']:.1f}x the CPU)")  # fmt: skip


if __name__ == "__main__":
    main()
