"""Fitting the simulated LLM to a real endpoint from its call log.

A call log is JSON lines, one per attempt, as
:class:`~megaactors.providers.chat_completions.ChatCompletionsClient` writes with
``call_log=PATH``: ``ts``, ``latency_s``, ``input_tokens``, ``output_tokens``,
``status`` (HTTP status, 0 for a timeout), ``model``. :func:`fit` estimates the
latency model ``latency = median_s·exp(sigma·z) + prefill_s_per_token·input_tokens +
per_output_token_s·output_tokens`` from the answered calls:

1. the per-token slopes and the median by **median regression** (least absolute
   deviations, solved exactly as a linear program): ``median_s·exp(sigma·z)`` is
   independent of the token counts, so the conditional median of the latency is
   ``median_s + prefill·input + decode·output`` and outliers weigh little; a token
   count that never changes gets no slope;
2. the **lognormal fit of the residual** ``latency - prefill·input - decode·output``:
   ``median_s`` is the exponential of the median of its logarithm, ``sigma`` the
   robust scale (1.4826 × median absolute deviation) of that logarithm;
3. standard errors of all four by a seeded bootstrap.

Every step is exact or correctly rounded (rational and decimal arithmetic where it
matters), so a log gives the same model file, to the bit, whichever BLAS kernels,
vector maths or thread count the CPU gets.

It also summarises the output-token distribution and the rates of 429s, server
errors and timeouts among all attempts. :func:`save_model` writes the model file
that ``--llm-model`` reads (:mod:`megaactors.providers.presets`).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal, localcontext
from pathlib import Path
from typing import Any

import numpy as np

from megaactors.errors import ParameterError
from megaactors.providers.median_regression import median_regression
from megaactors.providers.presets import MODEL_FORMAT, MODEL_VERSION
from megaactors.safe_files import Directory

__all__ = ["LATENCY_NAMES", "CallLog", "fit", "read_call_logs", "residual_figure"]

LATENCY_NAMES = ("median_s", "sigma", "prefill_s_per_token", "per_output_token_s")
_REQUIRED = ("ts", "latency_s", "status", "model")
_BOOTSTRAP = 100
_MAD_TO_SIGMA = 1.4826
_DIGITS = 40  # of the decimal logarithms: far past a float's, so rounded to one exactly


@dataclass
class CallLog:
    """Every attempt of one or more call logs, by column."""

    latency_s: list[float] = field(default_factory=list)
    input_tokens: list[int | None] = field(default_factory=list)
    output_tokens: list[int | None] = field(default_factory=list)
    status: list[int] = field(default_factory=list)
    ts: list[float] = field(default_factory=list)
    models: set[str] = field(default_factory=set)
    skipped: list[str] = field(default_factory=list)
    """Where and why each bad line was skipped (``--skip-bad-lines``)."""

    def __len__(self) -> int:
        return len(self.status)


def read_call_logs(paths: Iterable[str | Path], skip_bad_lines: bool = False) -> CallLog:
    """Read call logs; a line that is not a JSON object with the needed fields is a
    :class:`ParameterError` naming the file and line (or, with ``skip_bad_lines``,
    noted in ``skipped``)."""
    log = CallLog()
    for path in paths:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise ParameterError(f"cannot read call log {str(path)!r}: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise ParameterError(f"call log {str(path)!r} is not text (JSON lines)") from None
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            problem = _add(log, line)
            if problem is not None:
                where = f"{path}:{number}: {problem}"
                if not skip_bad_lines:
                    raise ParameterError(f"{where} (--skip-bad-lines to go on without it)")
                log.skipped.append(where)
    return log


def _add(log: CallLog, line: str) -> str | None:
    """Append one line's attempt; or say what is wrong with it."""
    try:
        row = json.loads(line)
    except ValueError:
        return "not JSON"
    if not isinstance(row, dict):
        return f"a JSON {type(row).__name__}, not an object"
    missing = [k for k in _REQUIRED if k not in row]
    status = row.get("status")
    if status == 200:
        missing += [k for k in ("input_tokens", "output_tokens") if row.get(k) is None]
    if missing:
        return f"missing {', '.join(missing)}"
    numbers = {k: row[k] for k in ("ts", "latency_s")}
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in numbers.values()):
        return "ts and latency_s must be numbers"
    if row["latency_s"] < 0:
        return f"negative latency_s {row['latency_s']}"
    if not isinstance(status, int) or isinstance(status, bool) or not 0 <= status <= 599:
        return f"status must be an HTTP status or 0, got {status!r}"
    tokens = (row.get("input_tokens"), row.get("output_tokens"))
    if any(t is not None and (not isinstance(t, int) or isinstance(t, bool) or t < 0) for t in tokens):
        return "input_tokens and output_tokens must be non-negative integers"
    log.ts.append(float(row["ts"]))
    log.latency_s.append(float(row["latency_s"]))
    log.status.append(status)
    log.input_tokens.append(tokens[0])
    log.output_tokens.append(tokens[1])
    log.models.add(str(row["model"]))
    return None


def _answered(log: CallLog) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Latencies, prompt tokens and reply tokens of the answered calls (status 200)."""
    ok = np.array(log.status) == 200
    tin = np.array([t for t, good in zip(log.input_tokens, ok, strict=True) if good], dtype=float)
    tout = np.array([t for t, good in zip(log.output_tokens, ok, strict=True) if good], dtype=float)
    return np.array(log.latency_s)[ok], tin, tout


def _latency_fit(
    tin: np.ndarray,
    tout: np.ndarray,
    lat: np.ndarray,
    weights: np.ndarray | None = None,
    near: list[float] | None = None,
) -> tuple[list[float], list[float]]:
    """``[median_s, sigma, prefill, decode]`` of the answered calls, each counted
    ``weights`` (positive integers: a bootstrap resample) times or once, and the median
    regression's coefficients (a resample's fit starts ``near`` those of the whole log).
    A token column that never changes cannot be told from the median: its slope is 0."""
    varying = [bool(np.ptp(t) > 0) for t in (tin, tout)]
    x = np.column_stack([np.ones_like(lat), *(t for t, v in zip((tin, tout), varying, strict=True) if v)])
    coefficients = median_regression(x, lat, weights, near if near is not None and len(near) == x.shape[1] else None)
    b = iter(coefficients[1:])
    prefill, decode = (max(0.0, next(b)) if v else 0.0 for v in varying)
    base = lat - prefill * tin - decode * tout
    median_s, sigma = _lognormal(base if weights is None else np.repeat(base, weights))
    return [median_s, sigma, prefill, decode], coefficients


def _lognormal(base: np.ndarray) -> tuple[float, float]:
    """``median_s`` and ``sigma`` of the positive residuals: the exponential of their
    logarithms' median, and 1.4826 × those logarithms' median absolute deviation.

    The logarithm is monotone, so both are found by ordering the residuals and their
    ratios to the median (IEEE-exact operations); only the one or two logarithms the
    deviation needs are taken, correctly rounded in decimal arithmetic. Vector maths
    chosen by CPU (as numpy's ``log`` is) never enters.
    """
    positive = np.sort(base[base > 0])
    if len(positive) < 2:
        raise ParameterError("the token counts explain every latency: no positive residual to fit")
    low, high = _middle(positive)
    median = low if low == high else math.sqrt(low * high)
    deviation = _middle(np.sort(np.maximum(positive / median, median / positive)))  # exp|log(x) - log(median)|
    with localcontext(prec=_DIGITS):
        mad = (Decimal(deviation[0]).ln() + Decimal(deviation[1]).ln()) / 2
    return median, _MAD_TO_SIGMA * float(mad)


def _middle(ordered: np.ndarray) -> tuple[float, float]:
    """The middle value of sorted values, twice, or the two middle ones."""
    half = len(ordered) // 2
    return float(ordered[half - 1 + len(ordered) % 2]), float(ordered[half])


def _log_moments(tokens: np.ndarray) -> tuple[float, float]:
    """Mean and standard deviation of the logarithms of positive token counts, in
    decimal arithmetic (the same on every CPU)."""
    values, counts = np.unique(tokens[tokens > 0], return_counts=True)
    if not len(values):
        return 0.0, 0.0
    with localcontext(prec=_DIGITS):
        logs = [(Decimal(int(v)).ln(), int(c)) for v, c in zip(values, counts, strict=True)]
        n = sum(c for _, c in logs)
        mean = sum((c * ln for ln, c in logs), Decimal(0)) / n
        variance = sum((c * (ln - mean) ** 2 for ln, c in logs), Decimal(0)) / n
        return float(mean), float(variance.sqrt())


def fit(log: CallLog, *, min_calls: int = 10, seed: int = 0) -> dict[str, Any]:
    """The latency model, its standard errors, the output-token distribution and the
    attempts' failure rates, as the content of a model file."""
    status = np.array(log.status)
    ok = status == 200
    if int(ok.sum()) < min_calls:
        raise ParameterError(f"the call log has {int(ok.sum())} answered call(s); fitting needs at least {min_calls}")
    lat, tin, tout = _answered(log)
    params, coefficients = _latency_fit(tin, tout, lat)
    rng = np.random.default_rng(seed)
    boots = []
    for _ in range(_BOOTSTRAP):
        counts = np.bincount(rng.integers(0, len(lat), len(lat)), minlength=len(lat))
        drawn = counts > 0  # each drawn call once, weighted by how often it was drawn
        boots.append(_latency_fit(tin[drawn], tout[drawn], lat[drawn], counts[drawn], coefficients)[0])
    errors = [statistics.stdev(column) for column in zip(*boots, strict=True)]  # exact rational sums
    attempts = len(status)
    span = max(log.ts) - min(log.ts) if log.ts else 0.0
    log_mean, log_sigma = _log_moments(tout)
    return {
        "format": MODEL_FORMAT,
        "version": MODEL_VERSION,
        **{name: float(v) for name, v in zip(LATENCY_NAMES, params, strict=True)},
        "uncertainty": {name: float(e) for name, e in zip(LATENCY_NAMES, errors, strict=True)},
        "output_tokens": {
            "mean": float(tout.mean()),
            "median": float(np.median(tout)),
            "p90": float(np.percentile(tout, 90)),
            "log_mean": log_mean,
            "log_sigma": log_sigma,
        },
        "input_tokens": {"mean": float(tin.mean()), "median": float(np.median(tin))},
        "rates": {
            "rate_limited": float((status == 429).sum() / attempts),
            "error": float(((status >= 500) | ((status >= 400) & (status != 429))).sum() / attempts),
            "timeout": float((status == 0).sum() / attempts),
        },
        "calls": int(ok.sum()),
        "attempts": attempts,
        "requests_per_minute": float(attempts / span * 60) if span > 0 else None,
        "models": sorted(log.models),
    }


def format_fit(model: dict[str, Any]) -> str:
    """The fit in a few lines, each number with its standard error."""
    err = model["uncertainty"]
    rates, out = model["rates"], model["output_tokens"]
    lines = [
        f"latency model from {model['calls']:,} answered calls of {model['attempts']:,} attempts "
        f"({', '.join(model['models'])}):",
        f"  median_s            {model['median_s']:.4g} ± {err['median_s']:.2g} s",
        f"  sigma               {model['sigma']:.4g} ± {err['sigma']:.2g}",
        f"  prefill_s_per_token {model['prefill_s_per_token']:.4g} ± {err['prefill_s_per_token']:.2g} s"
        + (f" ({1 / model['prefill_s_per_token']:,.0f} tokens/s)" if model["prefill_s_per_token"] > 0 else ""),
        f"  per_output_token_s  {model['per_output_token_s']:.4g} ± {err['per_output_token_s']:.2g} s"
        + (f" ({1 / model['per_output_token_s']:,.0f} tokens/s)" if model["per_output_token_s"] > 0 else ""),
        f"  output tokens       mean {out['mean']:.1f}, median {out['median']:.0f}, p90 {out['p90']:.0f}",
        f"  attempts            {rates['rate_limited']:.2%} rate-limited (429), {rates['error']:.2%} errors, "
        f"{rates['timeout']:.2%} timeouts",
    ]
    return "\n".join(lines)


def save_model(model: dict[str, Any], path: Path) -> None:
    """Write the model file (whole, or not at all; see :meth:`Directory.replace
    <megaactors.safe_files.Directory.replace>`) into its existing directory."""
    with Directory(path.parent, create=False) as directory:
        directory.replace(path.name, json.dumps(model, indent=2, sort_keys=True) + "\n")


def residual_figure(log: CallLog, model: dict[str, Any], path: Path) -> None:
    """A PNG: measured against fitted median latency, and the residual's logarithm
    against the fitted normal."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lat, tin, tout = _answered(log)
    tokens_part = model["prefill_s_per_token"] * tin + model["per_output_token_s"] * tout
    fitted = model["median_s"] + tokens_part
    base = lat - tokens_part
    logs = np.log(base[base > 0])
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.scatter(fitted, lat, s=4, alpha=0.4)
    top = float(max(fitted.max(), lat.max()))
    left.plot([0, top], [0, top], color="black", linewidth=1, label="measured = fitted median")
    left.set_xlabel("fitted median latency [s]")
    left.set_ylabel("measured latency [s]")
    left.legend()
    right.hist(logs, bins=60, density=True, alpha=0.6, label="log residual")
    mu, sigma = math.log(model["median_s"]), max(model["sigma"], 1e-9)
    grid = np.linspace(float(logs.min()), float(logs.max()), 200)
    right.plot(grid, np.exp(-0.5 * ((grid - mu) / sigma) ** 2) / (sigma * math.sqrt(2 * math.pi)), label="fit")
    right.set_xlabel("log(latency − token terms) [log s]")
    right.legend()
    fig.suptitle(f"calibration: median {model['median_s']:.3g} s, sigma {model['sigma']:.3g}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
