"""``megaactors calibrate``: fit the simulated LLM to a real endpoint's call log."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from megaactors.cli.common import CommandError, warn

__all__ = ["register"]


def register(sub: Any) -> None:
    p = sub.add_parser(
        "calibrate",
        help="fit the latency model (and token, error and 429 rates) to call logs",
        description="Read call logs (JSON lines: ts, latency_s, input_tokens, output_tokens, status, model; "
        "what ChatCompletionsClient(call_log=PATH) writes) and fit latency = median_s*exp(sigma*z) + "
        "prefill_s_per_token*input_tokens + per_output_token_s*output_tokens. --out writes the model file "
        "that --llm-model reads on run, sweep and submit.",
    )
    p.add_argument("logs", nargs="+", metavar="LOG", help="call log(s), JSON lines")
    p.add_argument("--out", "-o", default=None, help="write the model file here (JSON)")
    p.add_argument("--plot", default=None, help="residual plot (PNG; default: beside --out as NAME.residuals.png)")
    p.add_argument("--json", action="store_true", help="print the fit as one JSON object")
    p.add_argument("--skip-bad-lines", action="store_true", help="skip (and count) lines that cannot be read")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from megaactors.providers.calibration import fit, format_fit, read_call_logs, residual_figure, save_model

    out = Path(args.out) if args.out else None
    plot = Path(args.plot) if args.plot else (out.with_name(out.stem + ".residuals.png") if out else None)
    for path in (out, plot):
        if path is not None and not path.parent.is_dir():
            raise CommandError(f"cannot write {str(path)!r}: no directory {str(path.parent)!r}")
    log = read_call_logs(args.logs, skip_bad_lines=args.skip_bad_lines)
    for where in log.skipped[:5]:
        warn(f"skipped {where}")
    if len(log.skipped) > 5:
        warn(f"skipped {len(log.skipped) - 5} more bad line(s)")
    model = fit(log)
    model["sources"] = [str(p) for p in args.logs]
    model["skipped_lines"] = len(log.skipped)
    if plot is not None:
        residual_figure(log, model, plot)
    if out is not None:
        save_model(model, out)
    print(json.dumps(model, sort_keys=True) if args.json else format_fit(model))
    if not args.json:
        for path in (out, plot):
            if path is not None:
                print(f"wrote {path}")
    return 0
