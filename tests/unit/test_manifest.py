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


# --- an idle source's checkpoints skip the manifest -------------------------------------------


def test_checkpoints_that_only_move_positions_skip_the_manifest_up_to_a_minute(tmp_path):
    import json

    from htap.replica.manifest import IDLE_REWRITE_S, manifest_path, read_manifests, write_manifest
    from htap.replica.metadata import MetadataStore, NewDelta
    from htap.replica.models import Column
    from htap.replica.warehouse import LocalWarehouse

    now = [1000.0]
    store = MetadataStore(tmp_path / "m.db", create=True, clock=lambda: now[0])
    warehouse = LocalWarehouse(tmp_path / "wh")
    warehouse.create()
    t = store.add_table("src", "public", "t", [Column("id", "integer", False)], ["id"], "schema")
    store.start_copy(t.id)
    store.finish_copy(t.id, [NewDelta(t.id, "d0", 1, 1, 1, 1)], 1, None)
    store.commit_checkpoint("src", [], 5, now[0])

    def position() -> int:
        return read_manifests(warehouse)["src"]["sources"][0]["position"]

    def write():
        return write_manifest(warehouse, store, "src", clock=lambda: now[0])

    assert write() is not None and position() == 5
    for seq in (6, 7, 8):  # idle: the position moves, nothing else
        now[0] += 1
        store.commit_checkpoint("src", [], seq, now[0])
        assert write() is None
    assert position() == 5
    store.commit_checkpoint("src", [NewDelta(t.id, "d1", 9, 9, 1, 1)], 9, now[0])  # a change: written at once
    assert write() is not None and position() == 9
    assert [d["path"] for d in json.loads(warehouse.get_bytes(manifest_path("src")))["deltas"]] == ["d0", "d1"]
    store.commit_checkpoint("src", [], 10, now[0])
    store.set_state(t.id, "unhealthy", "damaged")  # a state change is a change too
    assert write() is not None and position() == 10
    store.commit_checkpoint("src", [], 11, now[0])
    assert write() is None
    now[0] += IDLE_REWRITE_S  # idle for a minute: rewritten, so the recovered position stays recent
    assert write() is not None and position() == 11
