"""Latency presets, rate-limit presets and model files.

A latency model is four numbers (:class:`~megaactors.core.llm.LatencyModel`):
``median_s``, ``sigma``, ``prefill_s_per_token``, ``per_output_token_s``. ``--llm-model``
takes a preset name from :data:`LATENCY_PRESETS` or a model file written by
``megaactors calibrate`` (JSON, ``"format": "megaactors-llm-model"``, ``"version": 1``).

The presets are round figures of the order public latency measurements of hosted
models showed in 2024–2025 (time to first token of a few hundred milliseconds,
prefill of tens of thousands of tokens per second, decode of 60–150 tokens per
second); they are starting points, not measurements of any endpoint. Calibrate from
your own call log for figures you can rely on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from megaactors.core.llm import LatencyModel
from megaactors.errors import ParameterError

__all__ = [
    "LATENCY_PRESETS",
    "MODEL_FORMAT",
    "MODEL_VERSION",
    "RATE_LIMIT_PRESETS",
    "RateLimits",
    "latency_model",
    "load_model_file",
]

MODEL_FORMAT = "megaactors-llm-model"
MODEL_VERSION = 1

LATENCY_PRESETS: dict[str, LatencyModel] = {
    # hosted small model: ~0.4 s to first token, ~50k prompt tokens/s, ~90 output tokens/s
    "hosted-small": LatencyModel(median_s=0.4, sigma=0.35, per_output_token_s=0.011, prefill_s_per_token=2e-5),
    # hosted large model: ~0.6 s to first token, ~20k prompt tokens/s, ~60 output tokens/s
    "hosted-large": LatencyModel(median_s=0.6, sigma=0.4, per_output_token_s=0.017, prefill_s_per_token=5e-5),
    # an 8B model on one data-centre GPU: ~0.05 s to first token, ~10k prompt tokens/s, ~100 output tokens/s
    "local-8b": LatencyModel(median_s=0.05, sigma=0.2, per_output_token_s=0.01, prefill_s_per_token=1e-4),
}


@dataclass(frozen=True)
class RateLimits:
    """A provider account's limits: requests and tokens per minute."""

    rpm: float
    tpm: float
    source: str


RATE_LIMIT_PRESETS: dict[str, RateLimits] = {
    "openai-tier1-mini": RateLimits(500, 200_000, "OpenAI rate-limit tiers, gpt-4o-mini, usage tier 1 (2024)"),
    "openai-tier5-mini": RateLimits(30_000, 150_000_000, "OpenAI rate-limit tiers, gpt-4o-mini, usage tier 5 (2024)"),
}
"""Two realistic settings: a new account and the largest standard tier."""


def latency_model(name_or_path: str) -> LatencyModel:
    """The latency model of a preset name or a model file; :class:`ParameterError`
    (one line) if it is neither, or the file is not a model of this format version."""
    preset = LATENCY_PRESETS.get(name_or_path)
    if preset is not None:
        return preset
    path = Path(name_or_path)
    if not path.suffix and not path.exists():
        raise ParameterError(
            f"unknown llm model {name_or_path!r}: not a preset ({', '.join(LATENCY_PRESETS)}) nor a model file"
        )
    return load_model_file(path)[0]


def load_model_file(path: Path) -> tuple[LatencyModel, dict[str, Any]]:
    """A model file's latency model and its whole content."""
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise ParameterError(f"cannot read llm model file {str(path)!r}: {exc.strerror or exc}") from None
    except ValueError:
        raise ParameterError(f"llm model file {str(path)!r} is not JSON") from None
    if not isinstance(data, dict) or data.get("format") != MODEL_FORMAT:
        raise ParameterError(f'{str(path)!r} is not a megaactors llm model file (no "format": {MODEL_FORMAT!r})')
    if data.get("version") != MODEL_VERSION:
        raise ParameterError(
            f"llm model file {str(path)!r} has format version {data.get('version')!r}; "
            f"this megaactors reads version {MODEL_VERSION}"
        )
    try:
        latency = LatencyModel(
            float(data["median_s"]),
            float(data["sigma"]),
            float(data["per_output_token_s"]),
            float(data["prefill_s_per_token"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ParameterError(f"llm model file {str(path)!r} lacks a valid latency number: {exc}") from None
    return latency, data
