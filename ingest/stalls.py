"""Where the stream's time goes when changes become readable late.

The stream's loop (htap.ingest.service) is one thread: it polls the source (reading and decoding
its messages), applies each event, publishes the in-memory tail and drains checkpoints. When a
commit becomes readable late, it either reached the loop late (the source sent it late, or
decoding what came before it fell behind) or waited in the loop (a drain, a publish, a check).
The watch keeps both, at a clock read per phase, and logs one line when either passes its
threshold, at most once per `every_s` (the worst case since the last line), so a stall in a
benchmark or in production says which side it was on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger(__name__)


@dataclass
class StallWatch:
    """Times one loop iteration's phases (`begin`, `mark` after each) and the lateness of each
    commit as it arrives (`arrived`)."""

    source: str
    busy_s: float = 0.25  # one iteration's work outside the poll past this is logged
    late_s: float = 1.0  # a commit reaching the loop later than this after its commit is logged
    every_s: float = 5.0
    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    arrival_delay_s: float | None = None  # of the newest commit, when it reached the loop (a metric)
    _phases: dict[str, float] = field(default_factory=dict)
    _mark: float = 0.0
    _busiest: tuple[float, dict[str, float]] | None = None  # since the last line
    _latest: tuple[float, int] | None = None  # (seconds late, seq), the worst since the last line
    _logged: float = 0.0

    def begin(self) -> None:
        self._phases = {}
        self._mark = self.clock()

    def mark(self, phase: str) -> None:
        """The time since the last mark went to `phase`."""
        now = self.clock()
        self._phases[phase] = self._phases.get(phase, 0.0) + now - self._mark
        self._mark = now

    def arrived(self, seq: int, commit_time: float) -> None:
        """A commit reached the loop (its commit time by the source's clock)."""
        late = self.wall() - commit_time
        self.arrival_delay_s = late
        if late >= self.late_s and (self._latest is None or late > self._latest[0]):
            self._latest = (late, seq)

    def end(self) -> None:
        """The iteration is over (the poll's wait for the source is not work: a phase named "poll"
        is left out of the busy time)."""
        busy = sum(t for p, t in self._phases.items() if p != "poll")
        if busy >= self.busy_s and (self._busiest is None or busy > self._busiest[0]):
            self._busiest = (busy, dict(self._phases))
        if (self._busiest or self._latest) and self.clock() >= self._logged + self.every_s:
            self._logged = self.clock()
            self._report()

    def _report(self) -> None:
        if self._latest is not None:
            late, seq = self._latest
            log.info("%s: the stream is behind: the commit at seq %s reached it %.2f s after it was committed "
                     "(the source sent it late, or decoding what came before it fell behind)", self.source, seq, late)
        if self._busiest is not None:
            busy, phases = self._busiest
            split = ", ".join(f"{p} {t:.3f} s" for p, t in sorted(phases.items(), key=lambda kv: -kv[1]))
            log.info("%s: the stream's loop was busy %.2f s between two polls (%s)", self.source, busy, split)
        self._busiest = self._latest = None
