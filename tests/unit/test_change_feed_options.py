"""The change feed's read options (htap.pushdown.change_feed.FeedOptions): what they mean, and
one clear error for each wrong one."""

from __future__ import annotations

import pytest

from htap.errors import ConfigError
from htap.pushdown.change_feed import LATEST, SNAPSHOT, FeedOptions, wanted


def test_starting_points_and_limits():
    assert FeedOptions.parse({"startingVersion": "24116032", "endingVersion": "24180000"}) == FeedOptions(
        24116032, None, 24180000)
    assert FeedOptions.parse({"startingversion": "0/16B3748"}).start == 0x16B3748  # an LSN, as Postgres writes it
    assert FeedOptions.parse({"startingVersion": "Snapshot"}).start == SNAPSHOT
    assert FeedOptions.parse({"startingVersion": "latest"}).start == LATEST
    assert FeedOptions.parse({"startingTimestamp": "1970-01-01T00:01:00"}).start_time == 60.0
    assert FeedOptions.parse({"startingTimestamp": "90.5"}).start_time == 90.5
    named = FeedOptions.parse({"maxChangesPerTrigger": "5", "feedName": "etl", "feedPinHours": "2"})
    assert (named.max_changes, named.name, named.pin_hours) == (5, "etl", 2.0)
    assert wanted({"readChangeFeed": "TRUE"}) and not wanted({})


@pytest.mark.parametrize("options, says", [
    ({"startingVersion": "1", "startingTimestamp": "2"}, "not both"),
    ({"startingVersion": "yesterday"}, "startingVersion: a seq, latest or snapshot"),
    ({"startingTimestamp": "noon"}, "startingTimestamp"),
    ({"maxChangesPerTrigger": "0"}, "maxChangesPerTrigger must be at least 1"),
    ({"feedPinHours": "-1"}, "feedPinHours must be above 0"),
])
def test_wrong_options_fail_with_what_to_write(options, says):
    with pytest.raises(ConfigError, match=says):
        FeedOptions.parse(options)


def test_read_change_feed_takes_true_or_false():
    with pytest.raises(ConfigError, match="readChangeFeed='yes': use true or false"):
        wanted({"readChangeFeed": "yes"})
