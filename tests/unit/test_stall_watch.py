"""The stream loop's stall log (htap.ingest.stalls.StallWatch): which side of the loop was slow."""

from __future__ import annotations

import logging

from htap.ingest.stalls import StallWatch

from storage_support import ManualClock


def test_busy_iterations_and_late_commits_are_logged_at_most_once_per_interval_with_the_worst(caplog):
    clock, wall = ManualClock(), ManualClock(start=100.0)
    watch = StallWatch("pg", busy_s=0.25, late_s=1.0, every_s=5.0, clock=clock, wall=wall)
    caplog.set_level(logging.INFO, logger="htap.ingest.stalls")

    def iteration(poll: float, drain: float) -> None:
        watch.begin()
        clock.advance(drain)
        watch.mark("drain")
        clock.advance(poll)
        watch.mark("poll")
        watch.end()

    iteration(poll=3.0, drain=0.01)  # waiting for the source is not work
    watch.arrived(7, commit_time=99.5)  # 0.5 s: not late
    assert caplog.messages == []
    iteration(poll=0.0, drain=0.4)  # the first stall is said at once
    assert len(caplog.messages) == 1 and "busy 0.40 s" in caplog.messages[0] and "drain 0.400 s" in caplog.messages[0]
    watch.arrived(8, commit_time=97.0)  # 3 s late
    iteration(poll=0.0, drain=0.9)
    iteration(poll=0.0, drain=0.3)
    assert len(caplog.messages) == 1  # within the interval: kept for the next line
    clock.advance(5)
    iteration(poll=0.0, drain=0.0)  # the worst of each since the last line
    assert len(caplog.messages) == 3, caplog.messages
    assert "seq 8 reached it 3.00 s after" in caplog.messages[1] and "busy 0.90 s" in caplog.messages[2]
    clock.advance(5)
    iteration(poll=0.0, drain=0.0)
    assert len(caplog.messages) == 3  # nothing new, nothing said
