"""The network between agents: delivery latency per channel, placement of groups on
machines, and seeded faults (lost, repeated and late messages, crashed agents,
partitions). Pure descriptions and seeded decisions; the simulation's delivery path
(:mod:`megaactors.runtime.net_delivery`) applies them."""

from megaactors.network.decisions import FaultDecisions
from megaactors.network.faults import FaultSpec, Partition, Window, parse_faults
from megaactors.network.model import CROSS, NetworkModel, parse_latency, parse_machines

__all__ = [
    "CROSS",
    "FaultDecisions",
    "FaultSpec",
    "NetworkModel",
    "Partition",
    "Window",
    "parse_faults",
    "parse_latency",
    "parse_machines",
]
