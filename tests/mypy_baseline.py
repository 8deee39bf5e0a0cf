"""The type checker's baseline: mypy errors per file and error code that are known
and may only go away.

``python tests/mypy_baseline.py --update`` lowers ``tests/data/mypy_baseline.json`` to
what mypy finds now; it refuses to raise any count (fix new errors instead).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / "tests" / "data" / "mypy_baseline.json"
_ERROR = re.compile(r"^(?P<path>[^:]+):\d+: error: .*\[(?P<code>[a-z-]+)\]$")


def run_mypy() -> tuple[Counter[str], str]:
    """Errors by ``path [code]``, and mypy's output (configured in pyproject.toml)."""
    out = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True)
    if out.returncode > 1:  # 1: type errors; more: mypy itself failed
        raise RuntimeError(f"mypy did not run: {out.stdout}{out.stderr}")
    found: Counter[str] = Counter()
    for line in out.stdout.splitlines():
        m = _ERROR.match(line)
        if m:
            found[f"{m['path']} [{m['code']}]"] += 1
    return found, out.stdout


def load() -> dict[str, int]:
    return json.loads(BASELINE.read_text())


if __name__ == "__main__":
    if sys.argv[1:] != ["--update"]:
        sys.exit("usage: python tests/mypy_baseline.py --update")
    found, _ = run_mypy()
    old = load() if BASELINE.exists() else dict(found)
    grown = {k: n for k, n in found.items() if n > old.get(k, 0)}
    if grown:
        sys.exit(f"refused: these would raise the baseline (fix them instead): {grown}")
    BASELINE.write_text(json.dumps(dict(sorted(found.items())), indent=1) + "\n")
    print(f"wrote {BASELINE}: {sum(found.values())} errors")
