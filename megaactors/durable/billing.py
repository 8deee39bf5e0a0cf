"""A tiny billing service over HTTP, and the client the outbox uses to reach it.

The service charges by idempotency key, as payment APIs do: the first request with
a key creates a charge; a repeat returns the same charge and charges nothing. It
also counts every request per key, so a test can tell a deduplicated repeat from a
second charge.

    POST /charges   {"key": ..., "amount_usd": ..., ...}  → {"charge_id", "key", "amount_usd"}
    POST /refunds   {"key": ..., "charge_id": ...}        → {"refund_id", "key", "charge_id"}
    GET  /ledger                                          → charges, refunds, requests per key

Run one with ``python -m megaactors.durable.billing --port 8080``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from megaactors.redact import redact

__all__ = ["MAX_BODY_BYTES", "BillingError", "BillingService", "charge", "ledger", "refund"]

MAX_BODY_BYTES = 1 << 16
"""Largest request body the service reads."""


def _refuse_constant(name: str) -> Any:
    """JSON's ``NaN`` and ``Infinity`` are not amounts (nor anything else here)."""
    raise ValueError(f"{name} is not valid JSON")


class BillingError(RuntimeError):
    """The billing service could not be reached or refused a request."""


class BillingService:
    """The service, on a background thread (``with BillingService() as svc: svc.url``)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.charges: dict[str, dict[str, Any]] = {}
        self.refunds: dict[str, dict[str, Any]] = {}
        self.requests: dict[str, int] = {}
        """Charge requests per key, repeats included."""
        self.fail_next = 0
        """Answer this many charge requests with 503 before serving (tests retries)."""
        self.on_charge: Callable[[str], None] | None = None
        """Called with the key after a charge is made, before the answer is sent."""
        self._lock = threading.Lock()
        service = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _reply(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path != "/ledger":
                    self._reply(404, {"error": f"no such path {self.path}"})
                    return
                self._reply(200, service.snapshot())

            def do_POST(self) -> None:
                try:
                    length = int(self.headers.get("Content-Length", 0))
                except ValueError:
                    length = -1
                if not 0 <= length <= MAX_BODY_BYTES:  # never read an unbounded or negative length
                    self.close_connection = True
                    self._reply(400, {"error": f"Content-Length must be 0 to {MAX_BODY_BYTES} bytes"})
                    return
                try:
                    raw = self.rfile.read(length)
                    if len(raw) != length:  # the client went away mid-request: nothing happened
                        self.close_connection = True
                        return
                    body = json.loads(raw or b"{}", parse_constant=_refuse_constant)
                    key = self.headers.get("Idempotency-Key") or body["key"]
                    if not isinstance(key, str) or not key:
                        raise TypeError(key)
                except (ValueError, KeyError, TypeError):
                    self._reply(400, {"error": "a JSON body with a key is required"})
                    return
                if self.path == "/charges":
                    status, answer = service._charge(key, body)
                elif self.path == "/refunds":
                    status, answer = service._refund(key, body)
                else:
                    status, answer = 404, {"error": f"no such path {self.path}"}
                self._reply(status, answer)

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="billing", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> BillingService:
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve in this thread until interrupted."""
        self._server.serve_forever()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> BillingService:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _charge(self, key: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        amount = body.get("amount_usd")
        if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not 0 <= amount < math.inf:
            return 400, {"error": f"a charge needs a finite non-negative amount_usd, got {amount!r}"}
        with self._lock:
            self.requests[key] = self.requests.get(key, 0) + 1
            if self.fail_next > 0:
                self.fail_next -= 1
                return 503, {"error": "temporarily unavailable"}
            existing = self.charges.get(key)
            if existing is None:
                existing = self.charges[key] = {
                    "charge_id": f"ch_{len(self.charges) + 1}",
                    "key": key,
                    "amount_usd": float(amount),
                }
                created = True
            else:
                created = False
        if created and self.on_charge is not None:
            self.on_charge(key)
        return (201 if created else 200), dict(existing)

    def _refund(self, key: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        key = body.get("charge_key", key)
        with self._lock:
            charge_ = self.charges.get(key)
            if charge_ is None or charge_["charge_id"] != body.get("charge_id"):
                return 404, {"error": f"no charge {body.get('charge_id')!r} under key {key!r}"}
            existing = self.refunds.get(key)
            if existing is None:
                existing = self.refunds[key] = {
                    "refund_id": f"re_{len(self.refunds) + 1}",
                    "key": key,
                    "charge_id": charge_["charge_id"],
                    "amount_usd": charge_["amount_usd"],
                }
                return 201, dict(existing)
            return 200, dict(existing)

    def snapshot(self) -> dict[str, Any]:
        """Charges, refunds and request counts as they stand."""
        with self._lock:
            return {
                "charges": {k: dict(v) for k, v in self.charges.items()},
                "refunds": {k: dict(v) for k, v in self.refunds.items()},
                "requests": dict(self.requests),
                "total_usd": sum(c["amount_usd"] for c in self.charges.values())
                - sum(r["amount_usd"] for r in self.refunds.values()),
            }


def _post(url: str, key: str, body: dict[str, Any], *, attempts: int = 8, timeout_s: float = 10.0) -> dict[str, Any]:
    """POST with retries (same idempotency key every time): delivered at least once."""
    data = json.dumps({**body, "key": key}).encode()
    delay, last = 0.05, ""
    for _ in range(attempts):
        request = urllib.request.Request(
            url, data=data, method="POST", headers={"Content-Type": "application/json", "Idempotency-Key": key}
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            last = f"HTTP {exc.code}: {exc.read()[:200].decode(errors='replace')}"
            if exc.code < 500:
                raise BillingError(redact(f"{url}: {last}")) from exc
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            last = str(exc)
        time.sleep(delay)
        delay = min(delay * 2, 2.0)
    raise BillingError(redact(f"{url}: gave up after {attempts} attempts: {last}"))


def charge(base_url: str, key: str, body: dict[str, Any]) -> dict[str, Any]:
    """Create (or find again) the charge under ``key``."""
    return _post(base_url.rstrip("/") + "/charges", key, body)


def refund(base_url: str, key: str, charge_id: str) -> dict[str, Any]:
    """Refund the charge ``charge_id`` made under ``key`` (idempotent)."""
    return _post(base_url.rstrip("/") + "/refunds", f"refund:{key}", {"charge_key": key, "charge_id": charge_id})


def ledger(base_url: str) -> dict[str, Any]:
    """The service's charges, refunds and request counts."""
    with urllib.request.urlopen(base_url.rstrip("/") + "/ledger", timeout=10) as response:
        return json.loads(response.read())


def main() -> None:
    parser = argparse.ArgumentParser(description="A billing service that charges once per idempotency key.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    args = parser.parse_args()
    service = BillingService(args.host, args.port)
    print(f"billing service on {service.url}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        service.serve_forever()


if __name__ == "__main__":
    main()
