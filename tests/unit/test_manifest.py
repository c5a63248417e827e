"""replica/manifest.py: where a recovered table's queryable window must start."""

from __future__ import annotations

from htap.replica.manifest import _stored, _window_floor

LAYOUTS = {"layouts": [{"table_id": 1, "from_seq": 100}, {"table_id": 1, "from_seq": 200},
                       {"table_id": 2, "from_seq": 150}]}


def delta(table_id: int, until: int | None, path: str = "d", dv: str | None = None) -> dict:
    return {"table_id": table_id, "until_seq": until, "path": path, "dv_checksum": dv}


def test_no_floor_while_a_repartitions_old_partitions_remain():
    assert max(_window_floor(LAYOUTS, [delta(1, 200), delta(1, None), delta(2, None)])) == 0


def test_the_window_starts_at_a_repartition_whose_old_partitions_were_collected():
    assert max(_window_floor(LAYOUTS, [delta(1, None), delta(2, None)])) == 200


def test_a_delta_counts_as_stored_only_with_its_sidecar():
    assert _stored(delta(1, None, "a", dv="x"), {"a", "a.dv"})
    assert not _stored(delta(1, None, "a", dv="x"), {"a"})
    assert _stored(delta(1, None, "a"), {"a"}) and not _stored(delta(1, None, "a"), set())
