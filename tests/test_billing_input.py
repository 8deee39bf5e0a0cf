"""The demo billing service against hostile requests: amounts that are not finite
numbers and lengths it must not trust are refused, and it keeps serving."""

from __future__ import annotations

import socket
from urllib.parse import urlparse

import pytest

from megaactors.durable.billing import MAX_BODY_BYTES, BillingService, charge, ledger


def raw_request(url: str, head: bytes, body: bytes = b"") -> bytes:
    """Send raw HTTP and return the status line (10 s at most: a hang fails the test)."""
    parts = urlparse(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as s:
        s.sendall(head + b"\r\n\r\n" + body)
        s.shutdown(socket.SHUT_WR)
        return s.recv(4096).split(b"\r\n", 1)[0]


HEAD = b"POST /charges HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nIdempotency-Key: k1"


@pytest.mark.parametrize("amount", [b"NaN", b"Infinity", b"-Infinity", b"1e400"])
def test_amounts_that_are_not_finite_numbers_are_refused(amount: bytes) -> None:
    body = b'{"amount_usd": ' + amount + b"}"
    with BillingService() as billing:
        status = raw_request(billing.url, HEAD + b"\r\nContent-Length: " + str(len(body)).encode(), body)
        assert status.endswith(b"400 Bad Request")
        book = ledger(billing.url)
        assert book["charges"] == {} and book["total_usd"] == 0
        assert charge(billing.url, "k1", {"amount_usd": 0.25})["amount_usd"] == 0.25
        assert ledger(billing.url)["total_usd"] == 0.25


@pytest.mark.parametrize("length", [b"-1", b"-99999", b"banana", str(MAX_BODY_BYTES + 1).encode(), b"99999999999"])
def test_lengths_it_cannot_trust_are_refused_without_reading(length: bytes) -> None:
    with BillingService() as billing:
        status = raw_request(billing.url, HEAD + b"\r\nContent-Length: " + length, b'{"amount_usd": 1}')
        assert status.endswith(b"400 Bad Request")
        assert ledger(billing.url)["charges"] == {}
