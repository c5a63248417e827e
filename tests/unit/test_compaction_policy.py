"""replica/compaction.py `pick`: size-tiered with exponentially growing limits, and max_deltas."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from unit_support import PROPERTY, make_delta

from htap.replica.compaction import Policy, pick

POLICY = Policy(min_bytes=100, ratio=4.0, max_deltas=5)


def sizes(chosen):
    return None if chosen is None else [d.bytes for d in chosen]


def deltas(*byte_sizes):
    return [make_delta(i + 1, bytes=b) for i, b in enumerate(byte_sizes)]


@pytest.mark.parametrize(
    "byte_sizes,expected",
    [
        ((), None),
        ((50,), None),
        ((10_000_000,), None),
        ((50, 60), [50, 60]),  # both in the smallest tier: a minor compaction
        ((50, 60, 1000), [50, 60]),  # the big one waits
        ((100, 100, 101), [100, 100]),  # the limit is inclusive
        ((50, 1000, 5000), [50, 1000]),  # tiers 100, 400, 1600: 50 and 1000 fit under 1600
        ((400, 401, 50_000), [400, 401]),  # 1600 holds both
        ((5000, 6000), [5000, 6000]),  # the limit keeps growing until two fit
        ((50, 10_000_000), [50, 10_000_000]),
        ((90, 7000, 80, 30_000), [90, 80]),  # input order is kept
    ],
)
def test_size_tiers(byte_sizes, expected):
    assert sizes(pick(deltas(*byte_sizes), POLICY)) == expected


def test_more_than_max_deltas_merges_the_smallest_tier_that_leaves_at_most_max_deltas():
    # 6 > 5: the four small ones (tier 100) leave 3; the big ones are not rewritten.
    assert sizes(pick(deltas(10, 10**9, 20, 10**8, 30, 40), POLICY)) == [10, 20, 30, 40]
    # Nine small checkpoints next to a base: the small ones, never the base.
    assert sizes(pick(deltas(10**9, *[50] * 9), POLICY)) == [50] * 9
    # Tier 100 would leave 6 (> 5): the next tier that leaves at most 5, here tier 1600.
    assert sizes(pick(deltas(10**9, 10**8, 10**7, 10**6, 1000, 1000, 50, 50), POLICY)) == [1000, 1000, 50, 50]
    # Only all of them leave at most 1.
    assert sizes(pick(deltas(10**9, 10**8, 50), Policy(100, 4.0, 1))) == [10**9, 10**8, 50]
    assert sizes(pick(deltas(10**9, 10**8, 10**7, 10**6, 10**5), POLICY)) == [10**6, 10**5]  # 5 is not more than 5


def test_zero_byte_deltas():
    assert sizes(pick(deltas(0, 0), POLICY)) == [0, 0]


def test_defaults_match_the_documented_configuration():
    assert Policy() == Policy(min_bytes=4 << 20, ratio=4.0, max_deltas=12)


def test_from_config_takes_the_three_settings():
    class Cfg:
        compaction_min_bytes, compaction_ratio, max_deltas = 7, 2.5, 3

    assert Policy.from_config(Cfg) == Policy(7, 2.5, 3)


@PROPERTY
@given(st.lists(st.integers(0, 10**10), max_size=20), st.integers(1, 10**7), st.floats(1.1, 16), st.integers(1, 20))
def test_pick_chooses_the_smallest_tier_with_two_deltas(byte_sizes, min_bytes, ratio, max_deltas):
    policy = Policy(min_bytes, ratio, max_deltas)
    ds = deltas(*byte_sizes)
    chosen = pick(ds, policy)
    if len(ds) < 2:
        assert chosen is None
    else:
        assert chosen is not None and len(chosen) >= 2
        assert [d for d in ds if d in chosen] == chosen  # a subsequence, in order
        biggest = max(d.bytes for d in chosen)
        # every delta at most as big as the biggest chosen one is chosen too (a whole tier)
        assert all(d in chosen for d in ds if d.bytes <= biggest)
        # what is left is at most max_deltas deltas
        assert len(ds) - len(chosen) + 1 <= max_deltas
        # and the tier below held fewer than two, or merging it would have left too many
        if biggest > min_bytes:
            below = sum(1 for d in ds if d.bytes <= biggest / ratio)
            assert below < 2 or len(ds) - below + 1 > max_deltas


@pytest.mark.parametrize("kw", [{"ratio": 1.0}, {"ratio": 0.5}, {"min_bytes": 0}, {"max_deltas": 0}])
def test_a_policy_that_could_never_pick_is_refused(kw):
    # ratio <= 1 or min_bytes 0 made pick() loop forever on deltas of different tiers; max_deltas 0
    # rewrote a partition's only delta on every pass.
    from htap.errors import ConfigError

    with pytest.raises(ConfigError, match="compaction"):
        Policy(**{"min_bytes": 100, "ratio": 4.0, "max_deltas": 5, **kw})
