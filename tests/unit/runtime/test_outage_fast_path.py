"""Riding out a ledger outage, without paying for it when there is none (issue 15 item 1).

The first attempt of a read or a commit point runs outside tenacity (a
``Retrying`` per commit point cost ~0.1 ms, 22 times a session); after a
``LedgerUnavailableError`` the retries keep the schedule they had -- 0.1 s,
0.2 s, 0.4 s ... within the window -- and a commit cut off by the outage is
asked about (``landed``) before it is written again.
"""

from __future__ import annotations

import pytest

from nahida_workers.errors import LedgerUnavailableError
from nahida_workers.runtime.commits import outage
from nahida_workers.testing import FakeClock


class Flaky:
    def __init__(self, failures: int, clock: FakeClock) -> None:
        self.failures, self.clock = failures, clock
        self.at: list[float] = []

    def __call__(self) -> str:
        self.at.append(self.clock.monotonic())
        if len(self.at) <= self.failures:
            raise LedgerUnavailableError("connection reset")
        return "ok"


def test_a_healthy_ledger_builds_no_retry_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_loop(*_a: object, **_k: object) -> None:
        raise AssertionError("a retry loop was built for a first attempt that succeeded")

    monkeypatch.setattr(outage, "Retrying", no_loop)
    clock = FakeClock()
    assert outage.read_through_outage(Flaky(0, clock), within_s=30, clock=clock) == "ok"
    written = outage.commit_through_outage(
        Flaky(0, clock), landed=lambda: False, within_s=30, clock=clock
    )
    assert written == "ok"


@pytest.mark.parametrize("kind", ["read", "commit"])
def test_retries_keep_their_backoff_after_a_first_failure(kind: str) -> None:
    clock = FakeClock()
    flaky = Flaky(4, clock)
    start = clock.monotonic()
    if kind == "read":
        got = outage.read_through_outage(flaky, within_s=30, clock=clock)
    else:
        asked: list[int] = []
        got = outage.commit_through_outage(
            flaky, landed=lambda: bool(asked.append(1)), within_s=30, clock=clock
        )
        assert len(asked) == 4, "every retry first asks whether the cut-off commit landed"
    assert got == "ok"
    gaps = [round(b - a, 3) for a, b in zip([start, *flaky.at], flaky.at, strict=False)][1:]
    assert gaps == [0.1, 0.2, 0.4, 0.8]


def test_the_window_still_bounds_the_retries() -> None:
    clock = FakeClock()
    flaky = Flaky(100, clock)
    with pytest.raises(LedgerUnavailableError):
        outage.read_through_outage(flaky, within_s=5, clock=clock)
    assert 4 <= len(flaky.at) <= 7
    with pytest.raises(LedgerUnavailableError):
        outage.read_through_outage(Flaky(100, clock), within_s=0, clock=clock)
