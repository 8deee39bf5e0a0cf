"""Calibration from call logs: the fit recovers known parameters, bad logs are refused
by line, and the model file drives runs through --llm-model (a real subprocess)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.optimize import linprog

from megaactors.errors import ParameterError
from megaactors.providers.calibration import fit, read_call_logs, save_model
from megaactors.providers.median_regression import median_regression
from megaactors.providers.presets import LATENCY_PRESETS, latency_model

TRUE = {"median_s": 0.8, "sigma": 0.5, "prefill_s_per_token": 2e-4, "per_output_token_s": 0.02}


def megaactors(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "megaactors", *args], capture_output=True, text=True, timeout=120)


def synthetic_log(path: Path, n: int = 5000, seed: int = 1, **true: float) -> Path:
    """``n`` attempts drawn from known parameters: 5 % of them 429s, errors or timeouts."""
    p = {**TRUE, **true}
    rng = np.random.default_rng(seed)
    with path.open("w") as f:
        for i in range(n):
            tin, tout = int(rng.integers(100, 20_000)), int(max(1, rng.lognormal(np.log(120), 0.6)))
            status = 200 if rng.random() > 0.05 else int(rng.choice([429, 500, 0]))
            z = rng.standard_normal()
            latency = p["median_s"] * np.exp(p["sigma"] * z) + p["prefill_s_per_token"] * tin
            latency += p["per_output_token_s"] * tout
            row = {"ts": 1.7e9 + i * 0.05, "latency_s": latency, "status": status, "model": "gpt-x"}
            row |= {"input_tokens": tin, "output_tokens": tout} if status == 200 else {}
            f.write(json.dumps(row) + "\n")
    return path


def test_every_parameter_is_recovered_within_ten_percent_from_5000_calls(tmp_path: Path) -> None:
    model = fit(read_call_logs([synthetic_log(tmp_path / "calls.jsonl")]))
    for name, value in TRUE.items():
        assert model[name] == pytest.approx(value, rel=0.10), name
        assert 0 < model["uncertainty"][name] < 0.05 * value  # the bootstrap says how sure the fit is
    assert model["calls"] + round(0.05 * 5000) == pytest.approx(5000, abs=60)
    assert sum(model["rates"].values()) == pytest.approx(0.05, abs=0.01)
    assert model["output_tokens"]["median"] == pytest.approx(120, rel=0.1)


def test_a_different_truth_gives_a_different_fit(tmp_path: Path) -> None:
    model = fit(read_call_logs([synthetic_log(tmp_path / "c.jsonl", 2000, median_s=0.3, prefill_s_per_token=0.0)]))
    assert model["median_s"] == pytest.approx(0.3, rel=0.1) and model["prefill_s_per_token"] < 1e-5


def test_calibrate_writes_a_model_file_a_run_then_uses(tmp_path: Path) -> None:
    log = synthetic_log(tmp_path / "calls.jsonl", 1000)
    out = tmp_path / "model.json"
    done = megaactors("calibrate", str(log), "--out", str(out), "--json")
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    assert set(TRUE) <= set(printed) and json.loads(out.read_text()) == printed
    assert (tmp_path / "model.residuals.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert latency_model(str(out)).median_s == printed["median_s"]
    slow = megaactors("run", "-n", "30", "--llm-model", str(out), "--json")
    preset = megaactors("run", "-n", "30", "--llm-model", "local-8b", "--json")
    assert slow.returncode == preset.returncode == 0, slow.stderr + preset.stderr
    assert json.loads(slow.stdout)["virtual_time_s"] > 2 * json.loads(preset.stdout)["virtual_time_s"]


def test_the_model_file_is_written_through_no_planted_link(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    out = tmp_path / "model.json"
    for planted in (tmp_path / ".model.json.tmp", out):  # a temporary name one could guess, the file itself
        planted.symlink_to(victim)
    save_model({"median_s": 0.5}, out)
    assert victim.read_text() == "keep"
    assert not out.is_symlink() and json.loads(out.read_text()) == {"median_s": 0.5}
    assert sorted(p.name for p in tmp_path.iterdir()) == [".model.json.tmp", "model.json", "victim.txt"]


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ("not json", "not JSON"),
        ("[1, 2]", "a JSON list, not an object"),
        ('{"ts": 1, "latency_s": 1, "status": 200, "model": "m", "output_tokens": 3}', "missing input_tokens"),
        ('{"ts": 1, "status": 500, "model": "m"}', "missing latency_s"),
        ('{"ts": 1, "latency_s": -1, "status": 429, "model": "m"}', "negative latency_s -1"),
        ('{"ts": 1, "latency_s": 1, "status": "ok", "model": "m"}', "status must be an HTTP status"),
    ],
)
def test_a_bad_line_is_reported_by_number(tmp_path: Path, line: str, needle: str) -> None:
    log = synthetic_log(tmp_path / "calls.jsonl", 50)
    log.write_text(log.read_text() + line + "\n")
    with pytest.raises(ParameterError, match=f"^{log}:51: {needle}"):
        read_call_logs([log])
    (skipped,) = read_call_logs([log], skip_bad_lines=True).skipped
    assert skipped.startswith(f"{log}:51: {needle}")


def test_a_bad_line_ends_the_command_with_nothing_written(tmp_path: Path) -> None:
    log = synthetic_log(tmp_path / "calls.jsonl", 50)
    log.write_text(log.read_text() + "not json\n")
    needle = "not JSON"
    out = tmp_path / "model.json"
    done = megaactors("calibrate", str(log), "--out", str(out))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        f"megaactors: error: {log}:51: {needle} (--skip-bad-lines to go on without it)"
    ]
    assert not out.exists() and not (tmp_path / "model.residuals.png").exists()
    skipped = megaactors("calibrate", str(log), "--skip-bad-lines", "--out", str(out))
    assert skipped.returncode == 0 and f"skipped {log}:51" in skipped.stderr and out.exists()


def test_too_few_answered_calls_and_unreadable_logs_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ParameterError, match="has 5 answered call"):
        fit(read_call_logs([synthetic_log(tmp_path / "c.jsonl", 5, seed=3)]))
    with pytest.raises(ParameterError, match="cannot read call log"):
        read_call_logs([tmp_path / "missing.jsonl"])


def test_a_model_file_of_another_version_or_format_is_refused(tmp_path: Path) -> None:
    newer = tmp_path / "newer.json"
    newer.write_text(json.dumps({"format": "megaactors-llm-model", "version": 2, **TRUE}))
    done = megaactors("run", "-n", "10", "--llm-model", str(newer))
    assert done.returncode == 2 and done.stdout == ""
    assert "has format version 2; this megaactors reads version 1" in done.stderr
    other = tmp_path / "other.json"
    other.write_text("{}")
    with pytest.raises(ParameterError, match="is not a megaactors llm model file"):
        latency_model(str(other))


def test_the_presets_set_all_four_numbers() -> None:
    for preset in LATENCY_PRESETS.values():
        assert preset.median_s > 0 and preset.sigma > 0 and preset.prefill_s_per_token > 0
        assert preset.per_output_token_s > 0


def test_the_median_regression_is_an_exact_least_absolute_deviations_fit() -> None:
    rng = np.random.default_rng(5)
    x = np.column_stack([np.ones(400), rng.integers(0, 1000, 400), rng.integers(0, 50, 400)]).astype(float)
    y = 0.5 + 1e-3 * x[:, 1] + 0.02 * x[:, 2] + rng.standard_cauchy(400)  # heavy tails

    def cost(b: np.ndarray) -> float:
        return float(np.abs(y - x @ b).sum())

    b = np.array(median_regression(x, y))
    assert np.sort(np.abs(y - x @ b))[:3].max() < 1e-12  # a vertex: through three calls
    # the primal program, solved by another method, reaches the same least sum of deviations
    n = len(y)
    primal = linprog(
        np.r_[np.zeros(3), np.ones(2 * n)],
        A_eq=np.hstack([x, np.eye(n), -np.eye(n)]),
        b_eq=y,
        bounds=[(None, None)] * 3 + [(0, None)] * (2 * n),
        method="highs-ipm",
    )
    assert cost(b) == pytest.approx(primal.fun, rel=1e-9)
    for step in np.diag([1e-4, 1e-7, 1e-6]):
        assert cost(b) < min(cost(b + step), cost(b - step))
    # a call drawn k times weighs k: the bootstrap's weighted fit is the fit of the repeated rows
    weights = rng.integers(1, 4, n)
    repeated = median_regression(np.repeat(x, weights, axis=0), np.repeat(y, weights))
    assert median_regression(x, y, weights) == repeated != list(b)
    # started near a guess (the rows far from it folded into two sums), the answer is the same
    for guess in (list(b), [0.0, 0.0, 0.0], [50.0, -1.0, 3.0]):
        assert median_regression(x, y, weights, near=guess) == repeated


def test_a_token_count_that_never_changes_gets_no_slope(tmp_path: Path) -> None:
    log = read_call_logs([synthetic_log(tmp_path / "c.jsonl", 1000, per_output_token_s=0.0)])
    log.output_tokens = [None if t is None else 100 for t in log.output_tokens]
    model = fit(log)
    assert model["per_output_token_s"] == 0.0 and model["uncertainty"]["per_output_token_s"] == 0.0
    assert model["prefill_s_per_token"] == pytest.approx(2e-4, rel=0.1)
    assert model["median_s"] == pytest.approx(0.8, rel=0.1)


def test_token_counts_in_proportion_are_refused(tmp_path: Path) -> None:
    log = read_call_logs([synthetic_log(tmp_path / "c.jsonl", 200)])
    log.output_tokens = [None if t is None else 2 * t for t in log.input_tokens]
    with pytest.raises(ParameterError, match="the token counts are collinear"):
        fit(log)


def _blas_settings() -> list[dict[str, str]]:
    """Environments that make OpenBLAS pick other kernels (or threads) and numpy other
    vector maths, among those this CPU can run."""
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    cores = ["Prescott", "Nehalem"] + ["Haswell"] * ("avx2" in flags) + ["SkylakeX"] * ("avx512f" in flags)
    settings = [{"OPENBLAS_CORETYPE": core, "OPENBLAS_NUM_THREADS": "1"} for core in cores]
    simd = np.show_config(mode="dicts")["SIMD Extensions"]["found"]
    return [*settings, {"OPENBLAS_NUM_THREADS": "2", "NPY_DISABLE_CPU_FEATURES": " ".join(simd)}]


@pytest.mark.skipif(
    platform.machine() not in ("x86_64", "AMD64")
    or "openblas" not in np.show_config(mode="dicts")["Build Dependencies"]["blas"]["name"],
    reason="OpenBLAS core types are x86-64 ones",
)
def test_the_model_file_is_the_same_whichever_kernels_the_cpu_selects(tmp_path: Path) -> None:
    log = synthetic_log(tmp_path / "calls.jsonl", 1000)
    script = (
        "import sys; from pathlib import Path; from megaactors.providers.calibration import fit, read_call_logs, "
        "save_model; save_model(fit(read_call_logs([sys.argv[1]])), Path(sys.argv[2]))"
    )
    files = []
    for i, setting in enumerate(_blas_settings()):
        out = tmp_path / f"model{i}.json"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENBLAS_", "NPY_", "OMP_"))}
        done = subprocess.run([sys.executable, "-c", script, str(log), str(out)], env=env | setting, timeout=120)
        assert done.returncode == 0, setting
        files.append(out.read_text())
    assert len(files) >= 3 and files == [files[0]] * len(files)
