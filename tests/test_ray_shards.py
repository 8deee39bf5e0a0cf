"""Sharded asyncio runs: the command line's --shards/--address, the Ray transport's
message ids and the coordinator's end-of-run detection (the sharded runs, on a Ray
cluster, are in tests/ray_cases.py)."""

from __future__ import annotations

import itertools
import json
import random
import sys
from typing import Any

import pytest

from megaactors import Organisation
from megaactors.behaviours.chat_round import ChatRound
from megaactors.cli import main
from megaactors.core.messages import int_size_total
from megaactors.errors import ClusterError
from megaactors.runtime import AsyncioRuntime
from megaactors.runtime.aio_shards import ShardError
from megaactors.runtime.ray_shards import EXACT_BELOW, ID_BLOCK, IdAllocator, IdBlock
from megaactors.runtime.shard_coordinator import Coordinator

RUN = ["run", "--runtime", "asyncio", "--topology", "two-tier", "--agents", "60", "--group-size", "12"]


def test_ids_from_blocks_encode_to_the_sizes_of_consecutive_ids() -> None:
    """Three shards reserving sends of random sizes in a random order: below the
    last size boundary the ids are consecutive; above it the blocks' unused ends
    leave gaps, among ids of one size, so the summed sizes are those of 0..M-1."""
    allocator, rng = IdAllocator(), random.Random(7)
    shards = [IdBlock(allocator.reserve) for _ in range(3)]
    taken: list[tuple[int, int]] = []  # (first, count) of each send
    while sum(count for _, count in taken) < 3 * ID_BLOCK:
        count = rng.choice([1, 11, 125, 4000])
        taken.append((rng.choice(shards).reserve(count), count))
    taken.sort()
    assert all(a + n <= b for (a, n), (b, _) in itertools.pairwise(taken))  # no id twice
    total = sum(count for _, count in taken)
    low = [(first, count) for first, count in taken if first < EXACT_BELOW]
    assert all(a + n == b for (a, n), (b, _) in itertools.pairwise(low)) and low[0][0] == 0  # no gap
    assert taken[-1][0] + taken[-1][1] > total  # gaps there are, above the boundary
    assert sum(int_size_total(first, first + count) for first, count in taken) == int_size_total(0, total)


def test_one_shard_per_group_at_most_and_ray_only_with_shards(capsys: pytest.CaptureFixture[str]) -> None:
    for args, needle in (
        (["--shards", "6"], "--shards 6 is more than the organisation's 5 groups"),
        (["--address", "127.0.0.1:6379"], "--shard-backend and --address go with --shards K"),
        (["--shards", "1", "--shard-backend", "ray"], "they need --shards 2 or more"),
        (["--shards", "1", "--address", "127.0.0.1:6379"], "they need --shards 2 or more"),
        (["--shards", "2", "--address", "127.0.0.1:1"], "cannot reach a Ray cluster at 127.0.0.1:1"),
        (["--shards", "2", "--address", "nowhere"], "--address must be HOST:PORT"),
        (["--shards", "2", "--shard-backend", "inprocess"], "--shard-backend inprocess is for --runtime sim"),
        (["--shards", "2", "--runtime", "pykka"], "--shards splits a run on --runtime sim or asyncio"),
    ):
        assert main([*RUN, *args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and needle in err[0], err
    with pytest.raises(SystemExit) as exc:  # the socket pairs are gone: "processes" is no backend
        main([*RUN, "--shards", "2", "--shard-backend", "processes"])
    assert exc.value.code == 2 and "processes" in capsys.readouterr().err


def test_without_ray_a_sharded_run_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    assert main([*RUN, "--shards", "2", "--json"]) == 2
    captured = capsys.readouterr()
    assert (
        captured.out == ""
        and captured.err.strip() == "megaactors: error: Ray is not installed: pip install 'megaactors[ray]'"
    )
    with pytest.raises(ClusterError, match=r"pip install 'megaactors\[ray\]'"):
        AsyncioRuntime(Organisation.two_tier(24, 6), ChatRound(), shards=2).run()
    assert main([*RUN, "--shards", "1", "--time-scale", "0.002", "--json"]) == 0  # one event loop: no Ray
    assert json.loads(capsys.readouterr().out)["messages"] > 0


class ScriptedShards:
    """A :class:`ShardTransport` whose shards say what a script says, one step per
    ``wait``; it records what the coordinator sends them."""

    def __init__(self, script: list[list[tuple[Any, ...]]]) -> None:
        self.script = script
        self.sent: list[tuple[int, tuple[Any, ...]]] = []

    def start(self, rt: Any, bounds: list[int]) -> None:
        raise AssertionError("the coordinator does not start shards")

    def send(self, shard: int, message: tuple[Any, ...]) -> None:
        self.sent.append((shard, message))

    def wait(self, pending: set[int]) -> list[tuple[Any, ...]]:
        return self.script.pop(0)

    def close(self) -> None:
        raise AssertionError("the coordinator does not close shards")


def test_the_coordinator_stops_shards_only_when_quiet_balanced_and_confirmed() -> None:
    shards = ScriptedShards([
        [("quiet", 0, 0, [0, 3], [0, 0], 1.0), ("quiet", 1, 0, [0, 0], [2, 0], 1.5)],  # a packet in flight
        [("quiet", 1, 1, [0, 0], [3, 0], 2.0)],  # received: balanced, probe both
        [("ack", 0, True), ("ack", 1, False)],  # shard 1 was woken since: no stop
        [("quiet", 1, 2, [0, 0], [3, 0], 2.5)],
        [("ack", 1, True), ("ack", 0, True)],
        [("result", 0, {"part": 0}), ("result", 1, {"part": 1})],
    ])  # fmt: skip
    coordinator = Coordinator(shards, 2)
    coordinator.run()
    probes = [(0, ("probe", 0)), (1, ("probe", 1))]
    assert shards.sent == [*probes, (0, ("probe", 0)), (1, ("probe", 2)), (0, ("stop",)), (1, ("stop",))]
    assert coordinator.results == {0: {"part": 0}, 1: {"part": 1}} and coordinator.error is None
    assert coordinator.end_s == 2.5 and shards.script == []


def test_a_lost_shard_aborts_the_others_and_becomes_the_error() -> None:
    stopped = ShardError("stopped because another shard failed")
    shards = ScriptedShards([
        [("quiet", 0, 0, [0, 1], [0, 0], 1.0)],
        [("lost", 1, "shard 1 was lost")],
        [("error", 2, stopped)],  # what an aborted shard reports: not the run's error
        [("result", 0, {})],
    ])  # fmt: skip
    coordinator = Coordinator(shards, 3)
    coordinator.run()
    assert shards.sent == [(0, ("abort",)), (1, ("abort",)), (2, ("abort",))]  # once each
    assert isinstance(coordinator.error, ShardError) and str(coordinator.error) == "shard 1 was lost"
