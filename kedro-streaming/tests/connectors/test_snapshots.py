"""Successive full snapshots kept as type 1 and type 2 tables: checked
against a plain-Python replay of the changes between the snapshots applied,
in the order they arrive (an older one is not applied)."""

from __future__ import annotations

import pytest
from kedro_streaming._connectors.changes import Changes
from kedro_streaming._connectors.scd import create_target, keep_changes

from tests.connectors.test_changes import replay_type1, replay_type2, table

SCHEMA = "id INT, lsn BIGINT, name STRING, city STRING"
S1 = (1, {1: ("Ana", "Lyon"), 2: ("Bo", "Lyon"), 3: ("Cy", "Lyon")})
S2 = (2, {1: ("Ana", "Oslo"), 2: ("Bo", "Lyon"), 4: ("Di", "Rome")})
S3 = (3, {1: ("Ana", "Oslo"), 3: ("Cy", "Rome"), 4: ("Di", "Rome")})
S4 = (4, {1: ("Ann", "Oslo"), 3: ("Cy", "Rome")})
# Two snapshots in one micro-batch, then S2 again, late, with S4.
BATCHES = [[S1], [S2, S3], [S2, S4]]


def replayed_changes(batches) -> list[dict]:
    """The changes between the snapshots applied: each newer than the last."""
    changes, last, rows = [], 0, {}
    for snapshots in batches:
        for seq, snapshot in sorted(snapshots, key=lambda s: s[0]):
            if seq <= last:
                continue
            for key, (name, city) in snapshot.items():
                if rows.get(key) != (name, city):
                    changes.append(_change(key, seq, "u", name, city))
            for key in rows.keys() - snapshot.keys():
                changes.append(_change(key, seq, "d", *rows[key]))
            rows, last = dict(snapshot), seq
    return changes


def _change(key, seq, op, name, city) -> dict:
    return {"id": key, "lsn": seq, "_op": op, "name": name, "city": city}


def apply_snapshots(spark, path, spec, batches, caplog) -> list[str]:
    first = spark.createDataFrame([], SCHEMA)
    apply = keep_changes(
        path, spec, "zones", lambda: "app-1", create_target(spark, path, spec, first)
    )
    frames = [
        spark.createDataFrame(
            [(k, seq, *row) for seq, snap in batch for k, row in snap.items()], SCHEMA
        )
        for batch in batches
    ]
    caplog.set_level("INFO", logger="kedro_streaming.delta")
    for batch_id, frame in enumerate(frames):
        apply(frame, batch_id)
    version = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").first()["version"]
    apply(frames[-1], len(frames) - 1)  # the last batch again, as after kill -9
    assert spark.sql(f"DESCRIBE HISTORY delta.`{path}`").first()["version"] == version
    return [m for m in caplog.messages if m.startswith("zones: ")]


@pytest.mark.parametrize(
    ("scd_type", "lines"),
    [
        pytest.param(
            1,
            [
                "zones: micro-batch 0: 3 snapshot rows: 3 inserted",
                # S2: 1 changed, 4 new, 3 gone, 2 as it was; S3: 3 back, 2 gone
                "zones: micro-batch 1: 6 snapshot rows: 2 inserted, 1 updated, "
                "2 deleted, 3 unchanged in its snapshot",
                "zones: micro-batch 2: 5 snapshot rows: 1 updated, 1 deleted, "
                "1 unchanged in its snapshot, 3 in a snapshot not newer than the "
                "last applied",
                "zones: micro-batch 2: 5 snapshot rows: 5 in a snapshot not newer "
                "than the last applied",
            ],
            id="type 1",
        ),
        pytest.param(
            2,
            [
                "zones: micro-batch 0: 3 snapshot rows: 3 added to the history, "
                "3 versions opened",
                "zones: micro-batch 1: 6 snapshot rows: 5 added to the history, "
                "3 unchanged in its snapshot, 3 versions opened, 3 versions closed",
                "zones: micro-batch 2: 5 snapshot rows: 2 added to the history, "
                "1 unchanged in its snapshot, 3 in a snapshot not newer than the "
                "last applied, 1 versions opened, 2 versions closed",
                "zones: micro-batch 2: 5 snapshot rows: 5 in a snapshot not newer "
                "than the last applied",
            ],
            id="type 2",
        ),
    ],
)
def test_snapshots_are_kept_as_the_changes_between_them(
    spark, tmp_path, caplog, scd_type, lines
):
    spec = Changes.parse(
        {"keys": "id", "sequence": "lsn", "scd_type": scd_type, "from_snapshots": True}
    )
    path = str(tmp_path / "zones")
    said = apply_snapshots(spark, path, spec, BATCHES, caplog)
    changes = replayed_changes(BATCHES)
    expected = (
        replay_type1(changes)
        if scd_type == 1
        else replay_type2(changes, ("name", "city"))
    )
    assert table(spark, path, scd_type) == expected
    assert said == lines
