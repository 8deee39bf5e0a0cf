"""Intervals over seeds and curve models compared by information criteria.

:func:`interval` summarises one figure measured over several seeds (mean and a
Student-t 95 % confidence interval of the mean). :func:`compare_models` fits makespan
against N with the candidate laws of the §3.4 discussion (tree depth, log N, √N, N,
a power law) by least squares and ranks them by AIC and BIC (Gaussian errors; every
seed's run is one point).

SciPy is imported by the functions that use it: every command line loads this module
(through the ``reproduce`` command's defaults), and SciPy takes seconds to import.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["MODELS", "compare_models", "interval"]

MODELS = ("depth", "log", "sqrt", "linear", "power")
"""``a + b·levels``, ``a + b·log10 N``, ``a + b·√N``, ``a + b·N`` and ``a·N^b``."""


def interval(values: Sequence[float], level: float = 0.95) -> dict[str, Any]:
    """Mean and two-sided Student-t confidence interval of the mean of ``values``
    (one value: the interval is that value)."""
    v = np.asarray(values, dtype=float)
    mean = float(v.mean())
    if len(v) < 2 or float(v.std(ddof=1)) == 0.0:
        lo = hi = mean
    else:
        from scipy import stats

        half = float(stats.t.ppf(0.5 + level / 2, len(v) - 1)) * float(v.std(ddof=1)) / math.sqrt(len(v))
        lo, hi = mean - half, mean + half
        if v.min() >= 0:  # a quantity that cannot be negative: nor can its interval
            lo = max(lo, 0.0)
    return {"mean": mean, "lo": lo, "hi": hi, "n": len(v), "min": float(v.min()), "max": float(v.max())}


def _criteria(y: np.ndarray, predicted: np.ndarray, params: int) -> dict[str, float]:
    n = len(y)
    rss = max(float(((y - predicted) ** 2).sum()), 1e-12 * float((y**2).sum()) + 1e-300)
    k = params + 1  # the error variance is estimated too
    ss_tot = float(((y - y.mean()) ** 2).sum())
    return {
        "rss": rss,
        "r2": 1.0 - rss / ss_tot if ss_tot > 0 else 1.0,
        "aic": n * math.log(rss / n) + 2 * k,
        "bic": n * math.log(rss / n) + k * math.log(n),
        "params": params,
    }


def _linear(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, dict[str, float]]:
    if np.ptp(x) == 0:  # a constant regressor (e.g. every tree has three levels): the mean alone
        return np.full_like(y, y.mean()), {"a": float(y.mean()), "b": 0.0, "free": 1}
    b, a = np.polyfit(x, y, 1)
    return a + b * x, {"a": float(a), "b": float(b), "free": 2}


def _power(n: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, dict[str, float]]:
    from scipy import optimize

    guess_b, guess_log_a = np.polyfit(np.log(n), np.log(np.maximum(y, 1e-9)), 1)
    try:
        (a, b), cov = optimize.curve_fit(
            lambda x, a, b: a * x**b, n, y, p0=(math.exp(guess_log_a), guess_b), maxfev=20_000
        )
        err = float(np.sqrt(cov[1, 1])) if np.isfinite(cov[1, 1]) else float("nan")
    except (RuntimeError, optimize.OptimizeWarning):
        a, b, err = math.exp(guess_log_a), guess_b, float("nan")
    return a * n**b, {"a": float(a), "b": float(b), "b_stderr": err, "free": 2}


def compare_models(agents: Sequence[int], levels: Sequence[int], makespan: Sequence[float]) -> dict[str, Any]:
    """Fit every model of :data:`MODELS` to the points and rank them (lowest AIC first).

    Returns ``{"models": {name: {a, b, r2, aic, bic, delta_aic, delta_bic}}, "best_aic",
    "best_bic", "points"}``."""
    n = np.asarray(agents, dtype=float)
    y = np.asarray(makespan, dtype=float)
    depth = np.asarray(levels, dtype=float)
    if len(n) < 3:
        raise ValueError(f"comparing models needs at least 3 points, got {len(n)}")
    out: dict[str, dict[str, float]] = {}
    for name, x in (("depth", depth), ("log", np.log10(n)), ("sqrt", np.sqrt(n)), ("linear", n)):
        predicted, params = _linear(x, y)
        out[name] = {**params, **_criteria(y, predicted, int(params["free"]))}
    predicted, params = _power(n, y)
    out["power"] = {**params, **_criteria(y, predicted, 2)}
    best_aic = min(out, key=lambda m: out[m]["aic"])
    best_bic = min(out, key=lambda m: out[m]["bic"])
    for m in out.values():
        m["delta_aic"] = m["aic"] - out[best_aic]["aic"]
        m["delta_bic"] = m["bic"] - out[best_bic]["bic"]
    return {"models": out, "best_aic": best_aic, "best_bic": best_bic, "points": len(n)}
