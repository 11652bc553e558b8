"""Tables kept from changes (SCD types 1 and 2): every table compared with
an independent replay of the whole change log in plain Python, whatever the
arrival order and batching (hypothesis draws them)."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kedro_streaming._connectors.changes import (
    END_AT,
    START_AT,
    Changes,
    changes_problems,
    column_problems,
)
from kedro_streaming._connectors.scd import create_target, keep_changes

SCHEMA = "id INT, lsn BIGINT, _op STRING, name STRING, city STRING"
COLUMNS = ["id", "lsn", "_op", "name", "city"]


def replay_type1(changes: list[dict]) -> set[tuple]:
    """Per key the change with the highest sequence; a delete leaves no row."""
    rows = set()
    for _, group in itertools.groupby(sorted(changes, key=_key), key=_key):
        last = max(group, key=lambda c: c["lsn"])
        if last["_op"] != "d":
            rows.add((last["id"], last["lsn"], last["name"], last["city"]))
    return rows


def replay_type2(changes: list[dict], tracked: tuple[str, ...]) -> set[tuple]:
    """Each key's changes in sequence order: a change of a tracked column
    opens a version (closing the open one), any other updates the open
    version, a delete closes it."""
    versions = []
    distinct = {json.dumps(c, sort_keys=True): c for c in changes}.values()
    for _, group in itertools.groupby(sorted(distinct, key=_key), key=_key):
        open_ = None
        for change in sorted(group, key=lambda c: c["lsn"]):
            if change["_op"] == "d":
                if open_:
                    open_["end"], open_ = change["lsn"], None
                continue
            values = {k: change[k] for k in ("id", "lsn", "name", "city")}
            same = open_ and all(open_["row"][c] == change[c] for c in tracked)
            if same:
                open_["row"] = values
                continue
            if open_:
                open_["end"] = change["lsn"]
            open_ = {"row": values, "start": change["lsn"], "end": None}
            versions.append(open_)
    return {(*v["row"].values(), v["start"], v["end"]) for v in versions}


def _key(change: dict) -> int:
    return change["id"]


def table(spark, path: str, scd_type: int) -> set[tuple]:
    columns = ["id", "lsn", "name", "city"] + (
        [START_AT, END_AT] if scd_type == 2 else []
    )
    return {
        tuple(r)
        for r in spark.read.format("delta").load(path).select(*columns).collect()
    }


def apply_batches(spark, tmp_path, spec: Changes, batches: list[list[dict]]) -> str:
    path = str(tmp_path / "table")
    first = spark.createDataFrame([], SCHEMA)
    create_target(spark, path, spec, first)
    apply = keep_changes(path, spec, "customers", lambda: "app-1")
    for batch_id, batch in enumerate(batches):
        rows = [tuple(c[k] for k in COLUMNS) for c in batch]
        apply(spark.createDataFrame(rows, SCHEMA), batch_id)
    return path


@st.composite
def change_logs(draw):
    """Many keys' changes (distinct sequences per key, values from small sets
    so that versions repeat), some repeated, each arriving in any of four
    micro-batches in any order. Keys are kept apart, so one table holds as
    many cases as it has keys, each with its own order and batching."""
    batches: list[list[dict]] = [[] for _ in range(4)]
    for key in range(draw(st.integers(8, 16))):
        lsns = draw(st.lists(st.integers(1, 40), min_size=1, max_size=6, unique=True))
        changes = [
            {
                "id": key,
                "lsn": lsn,
                "_op": draw(st.sampled_from(["c", "u", "u", "d"])),
                "name": draw(st.sampled_from(["Ana", "Bo"])),
                "city": draw(st.sampled_from(["Lyon", "Oslo"])),
            }
            for lsn in lsns
        ]
        for change in changes + draw(st.lists(st.sampled_from(changes), max_size=2)):
            batches[draw(st.integers(0, 3))].append(change)
    return [draw(st.permutations(batch)) for batch in batches]


EXAMPLES = settings(
    max_examples=4,
    deadline=None,
    derandomize=True,  # the same examples on every run, in CI too
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@EXAMPLES
@given(batches=change_logs())
def test_type1_is_the_replay_whatever_the_order_and_batching(
    spark, tmp_path_factory, batches
):
    spec = Changes.parse({"keys": ["id"], "sequence": "lsn"})
    path = apply_batches(spark, tmp_path_factory.mktemp("t1"), spec, batches)
    assert table(spark, path, 1) == replay_type1([c for b in batches for c in b])


@EXAMPLES
@given(batches=change_logs(), track=st.sampled_from([("name", "city"), ("name",)]))
def test_type2_is_the_replay_whatever_the_order_and_batching(
    spark, tmp_path_factory, batches, track
):
    setting = "all" if len(track) == 2 else list(track)
    spec = Changes.parse(
        {"keys": "id", "sequence": "lsn", "scd_type": 2, "track": setting}
    )
    path = apply_batches(spark, tmp_path_factory.mktemp("t2"), spec, batches)
    assert table(spark, path, 2) == replay_type2([c for b in batches for c in b], track)


def change(id_: int, lsn: int, op: str, name: str, city: str = "Lyon") -> dict:
    return {"id": id_, "lsn": lsn, "_op": op, "name": name, "city": city}


def test_a_late_update_after_a_delete_stays_out_and_a_replayed_batch_changes_nothing(
    spark, tmp_path, caplog
):
    spec = Changes.parse({"keys": "id", "sequence": "lsn"})
    batches = [
        [change(1, 1, "c", "Ana"), change(2, 1, "c", "Bo")],
        [change(1, 5, "d", "Ana")],
        [change(1, 3, "u", "Ann"), change(2, 4, "u", "Bob"), change(2, 2, "u", "B")],
    ]
    caplog.set_level("INFO", logger="kedro_streaming.delta")
    path = apply_batches(spark, tmp_path, spec, batches)
    assert table(spark, path, 1) == {(2, 4, "Bob", "Lyon")}
    assert caplog.messages[-1] == (
        "customers: micro-batch 2: 3 changes: 1 updated, "
        "1 older than a remembered delete, 1 superseded in its micro-batch"
    )
    version = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").first()["version"]
    apply = keep_changes(path, spec, "customers", lambda: "app-1")
    rows = [tuple(c[k] for k in COLUMNS) for c in [change(2, 9, "u", "Zed")]]
    apply(spark.createDataFrame(rows, SCHEMA), 2)  # batch 2 again, as after kill -9
    assert spark.sql(f"DESCRIBE HISTORY delta.`{path}`").first()["version"] == version
    assert table(spark, path, 1) == {(2, 4, "Bob", "Lyon")}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        pytest.param(
            {"keys": "id"},
            "has changes with no `sequence`: the columns that order the changes of "
            "a key: name them, e.g. `sequence: [lsn]`",
            id="no sequence",
        ),
        pytest.param(
            {"keys": "id", "sequence": "lsn", "delete": "_op = 'd'"},
            "has changes with `delete`, which is not one of its settings: did you "
            "mean `deletes`?",
            id="misspelt setting",
        ),
        pytest.param(
            {"keys": "id", "sequence": "lsn", "scd_type": 3},
            "has changes with scd_type 3: use 1 (the current rows) or 2 (one row "
            "per version)",
            id="unknown type",
        ),
        pytest.param(
            {"keys": "id", "sequence": "lsn", "track": ["name"]},
            "has changes with `track`, which only type 2 reads: add `scd_type: 2`, "
            "or remove `track`",
            id="track in type 1",
        ),
    ],
)
def test_settings_that_cannot_work_are_named_with_their_fix(changes, message):
    assert [str(p) for p in changes_problems(changes)] == [message]


def test_a_key_the_node_does_not_write_is_named_with_its_closest():
    spec = Changes.parse({"keys": "customer_id", "sequence": "lsn"})
    assert [str(p) for p in column_problems(spec, COLUMNS)] == [
        "has changes with keys `customer_id`, which the node's output does not "
        "have: name one of its columns: id, lsn, _op, name, city"
    ]
    spec = Changes.parse({"keys": "id", "sequence": "lns"})
    assert [p.fix for p in column_problems(spec, COLUMNS)] == ["did you mean `lsn`?"]
