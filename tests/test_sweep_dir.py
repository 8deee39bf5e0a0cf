"""A sweep's output directory under attack and under contention: no link followed,
one writer at a time, each run recorded once."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from megaactors.experiments.result_rows import DuplicateRowsWarning
from megaactors.experiments.sweep import SweepError, load_results, run_sweep

GRID = {"topology": "star", "agents": [10, 20, 30]}


def sweep(out: Path, grid: dict = GRID) -> object:
    return run_sweep(grid, out, workers=0, progress=False)


def test_a_link_planted_where_the_old_temporary_file_went_is_left_alone(tmp_path: Path) -> None:
    out, victim = tmp_path / "out", tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out.mkdir()
    (out / "results.csv.tmp").symlink_to(victim)
    sweep(out)
    assert victim.read_text() == "precious\n"
    assert len(load_results(out)) == 3
    assert sorted(p.name for p in out.iterdir()) == ["grid.json", "results.csv", "results.csv.tmp", "sweep.lock"]


@pytest.mark.parametrize("name", ["results.csv", "grid.json", "sweep.lock"])
def test_a_link_in_place_of_a_sweep_file_is_refused_and_its_target_untouched(name: str, tmp_path: Path) -> None:
    out, victim = tmp_path / "out", tmp_path / "victim.txt"
    sweep(out)
    victim.write_text("line one\nline two without newline")
    (out / name).unlink()
    (out / name).symlink_to(victim)
    with pytest.raises(SweepError, match=f"{name}: is a symbolic link, which is not followed here"):
        sweep(out)
    assert victim.read_text() == "line one\nline two without newline"


def test_a_dangling_link_is_not_followed_into_creating_its_target(tmp_path: Path) -> None:
    out, target = tmp_path / "out", tmp_path / "created-by-following"
    out.mkdir()
    (out / "grid.json").symlink_to(target)
    with pytest.raises(SweepError, match=r"grid\.json: is a symbolic link"):
        sweep(out)
    assert not target.exists() and not (out / "results.csv").exists()


def test_a_second_sweep_of_a_busy_directory_is_told_who_holds_it(tmp_path: Path) -> None:
    out = tmp_path / "busy"
    args = [sys.executable, "-m", "megaactors", "sweep", "--agents", "20000", "--seed", "1,2,3,4", "--workers", "1",
            "--out", str(out), "-q", "--no-plots"]  # fmt: skip
    first = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not ((out / "sweep.lock").exists() and "process" in (out / "sweep.lock").read_text()):
            assert time.monotonic() < deadline and first.poll() is None
            time.sleep(0.05)
        second = subprocess.run(args, capture_output=True, text=True, timeout=120)
        assert second.returncode == 2
        (line,) = second.stderr.strip().splitlines()
        assert f"another sweep is writing to {out} (process {first.pid} on " in line and "megaactors sweep" in line
        assert first.wait(180) == 0, first.stderr.read()
    finally:
        first.kill()
        first.wait()
    df = load_results(out)
    assert len(df) == 4 and len((out / "results.csv").read_text().splitlines()) == 5
    assert sweep(out, {"agents": 20000, "seed": [1, 2, 3, 4]}) is not None  # the lock went with its holder


def _duplicate_last_row(out: Path) -> None:
    lines = (out / "results.csv").read_text().splitlines(keepends=True)
    (out / "results.csv").write_text("".join([*lines, lines[-1], lines[1]]))


def test_duplicate_rows_are_dropped_with_a_warning_on_resume_and_by_plot(tmp_path: Path) -> None:
    out = tmp_path / "dup"
    first = sweep(out)
    _duplicate_last_row(out)
    with pytest.warns(DuplicateRowsWarning, match=r"2 row\(s\) repeat a run recorded earlier \(line\(s\) 5, 6\)"):
        loaded = load_results(out)
    assert len(loaded) == 3
    plotted = subprocess.run([sys.executable, "-m", "megaactors", "plot", str(out), "--out", str(tmp_path / "figs")],
                             capture_output=True, text=True, timeout=120)  # fmt: skip
    assert plotted.returncode == 0, plotted.stderr
    assert plotted.stderr.strip().splitlines() == [
        f"megaactors: warning: {out / 'results.csv'}: 2 row(s) repeat a run recorded earlier (line(s) 5, 6); "
        "the first row is kept"
    ]
    with pytest.warns(DuplicateRowsWarning):
        again = sweep(out)
    assert len(again) == 3 and list(again["agents"]) == list(first["agents"])
    assert len((out / "results.csv").read_text().splitlines()) == 4  # rewritten without the repeats
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(load_results(out)) == 3


def test_no_temporary_file_is_left_behind(tmp_path: Path) -> None:
    out = tmp_path / "clean"
    sweep(out)
    sweep(out, {"topology": "hierarchy", "agents": [10]})
    assert sorted(os.listdir(out)) == ["grid.json", "results.csv", "sweep.lock"]


def test_an_output_under_a_file_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(SweepError, match=r"cannot use .* as the output directory: Not a directory"):
        sweep(tmp_path / "file" / "out")


def test_figures_replace_a_planted_link_and_leave_its_target_alone(tmp_path: Path) -> None:
    out, victim = tmp_path / "figs", tmp_path / "victim.txt"
    sweep(out)
    victim.write_text("precious\n")
    (out / "messages.png").symlink_to(victim)
    plotted = subprocess.run([sys.executable, "-m", "megaactors", "plot", str(out)], capture_output=True, text=True,
                             timeout=120)  # fmt: skip
    assert plotted.returncode == 0, plotted.stderr
    assert victim.read_text() == "precious\n"
    assert not (out / "messages.png").is_symlink() and (out / "messages.png").read_bytes()[:4] == b"\x89PNG"
