"""RateLimitedLog with a hand-driven clock and timer: what reaches the log, and when."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from controlplane.ratelimited_log import RateLimitedLog

FIRST = "refused %(kind)s from %(node)s: %(reason)s"
SUMMARY = "refused %(count)d more %(kind)s from %(node)s in the last %(interval)s s: %(reason)s"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.timers: list[tuple[float, Callable[[], None]]] = []

    def __call__(self) -> float:
        return self.now

    def schedule(self, delay_s: float, callback: Callable[[], None]) -> object:
        self.timers.append((self.now + delay_s, callback))
        return None

    def advance(self, seconds: float) -> None:
        """Move the clock and fire the timers that came due, in order."""
        self.now += seconds
        due = sorted((t for t in self.timers if t[0] <= self.now), key=lambda t: t[0])
        self.timers = [t for t in self.timers if t[0] > self.now]
        for _, callback in due:
            callback()


@pytest.fixture
def clock() -> Clock:
    return Clock()


def _limiter(clock: Clock, logger_name: str) -> RateLimitedLog:
    return RateLimitedLog(
        logging.getLogger(logger_name), interval_s=10.0, clock=clock, schedule=clock.schedule
    )


def _lines(caplog: pytest.LogCaptureFixture, name: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == name]


def test_a_flood_writes_the_first_line_then_one_summary_per_interval(clock, caplog):
    limiter = _limiter(clock, "t.flood")
    caplog.set_level(logging.WARNING, "t.flood")
    written = [
        limiter.log(
            ("heartbeat", "edge-2"), FIRST, SUMMARY, kind="heartbeat", node="edge-2", reason=f"bad {i}"
        )
        for i in range(6000)
    ]
    assert written.count(True) == 1 and written[0]
    assert _lines(caplog, "t.flood") == ["refused heartbeat from edge-2: bad 0"]
    clock.advance(9.9)
    assert len(_lines(caplog, "t.flood")) == 1, "nothing more before the interval ends"
    clock.advance(0.1)
    assert _lines(caplog, "t.flood")[1:] == [
        "refused 5999 more heartbeat from edge-2 in the last 10 s: bad 5999"
    ]
    clock.advance(60)
    assert len(_lines(caplog, "t.flood")) == 2, "a burst that stopped is summed up once"


def test_each_key_has_its_own_window(clock, caplog):
    limiter = _limiter(clock, "t.keys")
    caplog.set_level(logging.WARNING, "t.keys")
    for node in ("edge-1", "edge-2"):
        for kind in ("heartbeat", "report"):
            for _ in range(3):
                limiter.log((kind, node), FIRST, SUMMARY, kind=kind, node=node, reason="x")
    assert len(_lines(caplog, "t.keys")) == 4
    clock.advance(10)
    assert len(_lines(caplog, "t.keys")) == 8
    assert "refused 2 more report from edge-2 in the last 10 s: x" in _lines(caplog, "t.keys")


def test_after_a_quiet_interval_an_occurrence_is_written_as_it_is(clock, caplog):
    limiter = _limiter(clock, "t.quiet")
    caplog.set_level(logging.WARNING, "t.quiet")
    assert limiter.log("k", FIRST, SUMMARY, kind="report", node="n", reason="one")
    clock.advance(30)
    assert limiter.log("k", FIRST, SUMMARY, kind="report", node="n", reason="two")
    assert _lines(caplog, "t.quiet") == ["refused report from n: one", "refused report from n: two"]


def test_without_a_timer_the_next_occurrence_after_the_interval_writes_the_summary(clock, caplog):
    limiter = RateLimitedLog(
        logging.getLogger("t.notimer"), interval_s=10.0, clock=clock, schedule=lambda d, c: None
    )
    caplog.set_level(logging.WARNING, "t.notimer")
    for _ in range(5):
        limiter.log("k", FIRST, SUMMARY, kind="report", node="n", reason="r")
    clock.advance(11)
    assert limiter.log("k", FIRST, SUMMARY, kind="report", node="n", reason="last")
    assert _lines(caplog, "t.notimer")[1:] == ["refused 5 more report from n in the last 10 s: last"]
    limiter.log("k", FIRST, SUMMARY, kind="report", node="n", reason="held")
    assert limiter.flush() == 1
    assert _lines(caplog, "t.notimer")[-1] == "refused 1 more report from n in the last 10 s: held"


def test_data_with_percent_signs_never_breaks_the_template(clock, caplog):
    limiter = _limiter(clock, "t.percent")
    caplog.set_level(logging.WARNING, "t.percent")
    limiter.log("k", FIRST, SUMMARY, kind="%s%d", node="%(x)s", reason="100%")
    assert _lines(caplog, "t.percent") == ["refused %s%d from %(x)s: 100%"]


def test_invented_keys_are_bounded(clock, caplog):
    limiter = RateLimitedLog(
        logging.getLogger("t.bound"), interval_s=10.0, clock=clock, schedule=clock.schedule, max_keys=8
    )
    for i in range(1000):
        limiter.log(f"node-{i}", FIRST, SUMMARY, kind="report", node=str(i), reason="r")
    assert len(limiter._windows) <= 8
