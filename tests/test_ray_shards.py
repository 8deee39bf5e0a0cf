"""Sharded asyncio runs: the command line's --shards/--address and the Ray
transport's message ids (the sharded runs, on a Ray cluster, are in tests/ray_cases.py)."""

from __future__ import annotations

import itertools
import json
import random
import sys

import pytest

from megaactors import Organisation
from megaactors.behaviours.chat_round import ChatRound
from megaactors.cli import main
from megaactors.core.messages import int_size_total
from megaactors.errors import ClusterError
from megaactors.runtime import AsyncioRuntime
from megaactors.runtime.ray_shards import EXACT_BELOW, ID_BLOCK, IdAllocator, IdBlock

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
