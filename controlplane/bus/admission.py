"""How fast the hub admits registrations (``RegisterAckV1``'s ``retry_after_s``)."""

from __future__ import annotations

__all__ = ["AdmissionPace"]


class AdmissionPace:
    """When to tell a registration beyond those in flight to come back (``RegisterAckV1``'s
    ``retry_after_s``): turns spaced at a bounded admission rate, so that a storm of thousands
    comes back as a steady stream instead of another wave.

    ``turn`` hands out the next free slot after the ones in flight would be done, one slot of
    ``1 / rate`` each; the agent adds its own jitter. The rate is a bound, not a measurement: a
    rate learnt from the answers while deferring learns the pace it handed out (agents come back
    when told), which only ever ratchets down. A hub slower than the rate finds its slots still
    full when a turn comes and defers again (an answer without a read of the message, cheap).
    """

    def __init__(self, *, rate: float = 400.0, max_wait_s: float = 120.0) -> None:
        if rate <= 0:
            raise ValueError("rate must be positive")
        self.rate = rate  # registrations admitted per second at most, in turns
        self.max_wait_s = max_wait_s
        self._next_slot = float("-inf")

    def turn(self, now: float, in_flight: int) -> float:
        """Seconds until this registration's turn: after the ``in_flight`` ones and the turns given
        before it, one slot of ``1 / rate`` each (at most ``max_wait_s``)."""
        slot = max(self._next_slot, now + in_flight / self.rate)
        self._next_slot = slot + 1.0 / self.rate
        return min(slot - now, self.max_wait_s)
