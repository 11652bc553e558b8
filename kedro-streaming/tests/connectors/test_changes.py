"""Tables kept from changes (SCD types 1 and 2): every table compared with
an independent replay of the whole change log in plain Python, whatever the
arrival order and batching (hypothesis draws them)."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kedro_streaming._cli.sinks import _described_totals
from kedro_streaming._connectors.changes import (
    END_AT,
    START_AT,
    Changes,
    changes_problems,
    column_problems,
)
from kedro_streaming._connectors.scd import create_target, keep_changes
from kedro_streaming._observe.metrics import StreamMetrics
from kedro_streaming._observe.state import StreamState
from pyspark.sql import SparkSession

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


def table(spark, path: str, scd_type: int, seq: str = "lsn") -> set[tuple]:
    columns = ["id", seq, "name", "city"] + (
        [START_AT, END_AT] if scd_type == 2 else []
    )
    rows = spark.read.format("delta").load(path).select(*columns).collect()
    return {tuple(row) for row in rows}


def apply_batches(spark, tmp_path, spec: Changes, batches: list[list[dict]]) -> str:
    path = str(tmp_path / "table")
    first = spark.createDataFrame([], SCHEMA)
    new = create_target(spark, path, spec, first)
    assert new  # its first inserts appended
    apply = keep_changes(path, spec, "customers", lambda: "app-1", new)
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
    max_examples=2,
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
        pytest.param(
            {
                "keys": "id",
                "sequence": "lsn",
                "deletes": "gone",
                "from_snapshots": True,
            },
            "has changes with `deletes` and from_snapshots: a key missing from a "
            "snapshot is its delete, and an older snapshot is never applied: "
            "remove `deletes`",
            id="snapshots with deletes",
        ),
        pytest.param(
            {"keys": "id", "sequence": ["day", "hour"], "from_snapshots": True},
            "has changes from snapshots with a sequence of several columns: name "
            "the one column that orders the snapshots (e.g. the snapshot's date), "
            "`sequence: snapshot_at`",
            id="snapshots by two columns",
        ),
        pytest.param(
            {"keys": "id", "sequence": "lsn", "from_snapshots": "yes"},
            "has changes with from_snapshots 'yes': use `from_snapshots: true` "
            "(each micro-batch holds whole snapshots) or leave it out",
            id="from_snapshots not a boolean",
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


# A run through the hooks: Debezium's JSON events in text files, a node that
# turns them into changes, a type 1 and a type 2 table, a quarantine.
ROW = "id INT NOT NULL, name STRING, city STRING"


def debezium_event(change: dict) -> str:
    """The event Debezium writes for ``change`` (with its schema envelope on
    odd sequences, as with `value.converter.schemas.enable`)."""
    image = {k: change[k] for k in ("id", "name", "city")}
    payload = {
        "before": image if change["_op"] == "d" else None,
        "after": None if change["_op"] == "d" else image,
        "source": {"connector": "postgresql", "lsn": change["lsn"], "txId": 9},
        "op": change["_op"],
        "ts_ms": 1_700_000_000_000 + change["lsn"],
    }
    if change["lsn"] % 2:
        return json.dumps({"schema": {"type": "struct"}, "payload": payload})
    return json.dumps(payload)


def applied_changes(events):
    from kedro_streaming import PROVENANCE_COLUMNS, debezium_changes  # noqa: PLC0415

    changes = debezium_changes(events, ROW)
    return changes.where("problems IS NULL").drop(
        *PROVENANCE_COLUMNS, "raw_payload", "problems"
    )


def refused_changes(events):
    from kedro_streaming import debezium_changes  # noqa: PLC0415

    return debezium_changes(events, ROW).where("problems IS NOT NULL")


def cdc_catalog(folder, files_per_batch=None, **changes):
    from kedro.io import DataCatalog  # noqa: PLC0415

    def table(name, **more):
        return {
            "type": "kedro_streaming.SparkStreamingDataset",
            "file_format": "delta",
            "filepath": str(folder / name),
            "save_args": {
                "checkpoint": str(folder / "checkpoints" / name),
                "changes": {"keys": ["id"], "sequence": "_lsn", **more},
            },
        }

    return DataCatalog.from_config(
        {
            "events": {
                "type": "kedro_streaming.SparkStreamingDataset",
                "file_format": "text",
                "filepath": str(folder / "events"),
                "load_args": (
                    {"maxFilesPerTrigger": files_per_batch} if files_per_batch else {}
                ),
            },
            "customers": table("customers", **changes),
            "customer_history": table("customer_history", scd_type=2),
            "refused_events": {
                "type": "kedro_streaming.SparkStreamingDataset",
                "file_format": "parquet",
                "filepath": str(folder / "refused"),
                "save_args": {"checkpoint": str(folder / "checkpoints" / "refused")},
            },
        }
    )


T1_ZERO = dict.fromkeys(
    [
        "inserted",
        "updated",
        "deleted",
        "not_newer_than_row",
        "delete_changing_nothing",
        "older_than_remembered_delete",
        "superseded_in_batch",
        "without_key_or_sequence",
    ],
    0,
)


def cdc_run(catalog) -> None:
    from kedro.pipeline import node, pipeline  # noqa: PLC0415
    from kedro.runner import SequentialRunner  # noqa: PLC0415

    from tests.helpers import registered, streaming_hooks  # noqa: PLC0415

    nodes = pipeline(
        [
            node(applied_changes, "events", "customers", name="current"),
            node(applied_changes, "events", "customer_history", name="history"),
            node(refused_changes, "events", "refused_events", name="refused"),
        ]
    )
    hooks = streaming_hooks(metrics_port=0, trigger="available_now")
    hooks.before_pipeline_run({}, nodes, catalog)
    SequentialRunner().run(nodes, catalog, registered(hooks))
    hooks.after_pipeline_run({})


def test_a_run_keeps_both_tables_from_debezium_events_and_quarantines_the_rest(
    spark, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    first = [
        change(1, 10, "r", "Ana"),  # the snapshot
        change(2, 10, "r", "Bo"),
        change(1, 20, "u", "Ana", "Oslo"),
        change(3, 30, "c", "Cy"),
        change(2, 40, "d", "Bo"),
    ]
    late = [
        change(2, 35, "u", "Bob"),  # older than the delete: stays out
        change(1, 15, "u", "Ann"),  # takes its place in history
        change(1, 20, "u", "Ana", "Oslo"),  # a copy
        change(3, 50, "u", "Cy", "Rome"),
    ]
    broken = [
        "",  # a tombstone is an empty line in a text file: no event
        '{"op": "t", "source": {"lsn": 60}}',
        '{"op": "u", "after": {"id": 4, "name": "Di"}, "source": {}}',
        '{"op": "u", "after": {"name": "Ed"}, "source": {"lsn": 61}}',
        "not json",
    ]
    events = tmp_path / "events"
    events.mkdir()
    (events / "0.json").write_text("\n".join(map(debezium_event, first)) + "\n")
    cdc_run(cdc_catalog(tmp_path))
    (events / "1.json").write_text(
        "\n".join([*map(debezium_event, late), *broken]) + "\n"
    )
    cdc_run(cdc_catalog(tmp_path))

    # The micro-batches' sessions never became the active one (a memory sink
    # started later would register its table where `spark` cannot see it).
    assert SparkSession.getActiveSession() is spark
    every = first + late
    assert table(spark, str(tmp_path / "customers"), 1, "_lsn") == replay_type1(every)
    history = table(spark, str(tmp_path / "customer_history"), 2, "_lsn")
    assert history == replay_type2(every, ("name", "city"))
    assert history == {
        (1, 10, "Ana", "Lyon", 10, 15),
        (1, 15, "Ann", "Lyon", 15, 20),
        (1, 20, "Ana", "Oslo", 20, None),
        (2, 10, "Bo", "Lyon", 10, 35),
        (2, 35, "Bob", "Lyon", 35, 40),
        (3, 30, "Cy", "Lyon", 30, 50),
        (3, 50, "Cy", "Rome", 50, None),
    }
    refused = spark.read.parquet(str(tmp_path / "refused"))
    assert sorted(r.problems for r in refused.collect()) == [
        "missing id",
        "missing sequence source.lsn",
        "not a Debezium change event",
        "not a Debezium change event",
        "unsupported operation 't' (truncate)",
    ]
    assert_outcomes_counted(tmp_path / "data" / "streams")


def assert_outcomes_counted(streams) -> None:
    """What became of the changes, worked out by hand from the two batches
    above, in the progress log, the totals, `kedro streams status` and the
    Prometheus series."""
    state = StreamState(str(streams))
    by_batch = {
        (r["query"], r["batch"]): (r.get("changes"), r.get("versions"))
        for r in state.records()
    }
    nothing = {"without_key_or_sequence": 0}
    assert by_batch[("customers", 0)] == (
        # key 1: 20 over 10; key 2: its delete over 10, no row yet; key 3 new
        {**T1_ZERO, "inserted": 2, "delete_changing_nothing": 1,
         "superseded_in_batch": 2},
        {},
    )  # fmt: skip
    assert by_batch[("customers", 1)] == (
        # 2@35 < its delete @40; 1@20 over 1@15, then equal to the row's; 3@50
        {**T1_ZERO, "updated": 1, "not_newer_than_row": 1,
         "older_than_remembered_delete": 1, "superseded_in_batch": 1},
        {},
    )  # fmt: skip
    assert by_batch[("customer_history", 0)] == (
        {"added_to_history": 5, "repeated": 0, **nothing},
        {"opened": 4, "closed": 0, "rewritten": 0, "removed": 0},
    )
    assert by_batch[("customer_history", 1)] == (
        # 1@15 and 2@35 split a version each (its end moves: rewritten); 3@50
        # closes 3@30; 1@20 is a copy
        {"added_to_history": 3, "repeated": 1, **nothing},
        {"opened": 3, "closed": 1, "rewritten": 2, "removed": 0},
    )
    totals = state.totals()
    assert _described_totals(totals["customers"])[0] == (
        "9 changes handed to the table in 2 batches: 2 inserted, 1 updated, 1 not newer "
        "than the table's row, 1 deletes changing nothing, 1 older than a "
        "remembered delete, 3 superseded in its micro-batch"
    )
    assert _described_totals(totals["customer_history"])[0] == (
        "9 changes handed to the table in 2 batches: 8 added to the history, 1 repeated, "
        "7 versions opened, 1 versions closed, 2 versions rewritten"
    )
    metrics = StreamMetrics()
    for record in state.records():
        metrics.record(record)
    value = metrics.registry.get_sample_value
    assert (
        value(
            "kedro_stream_changes_total",
            {"query": "customers", "outcome": "superseded_in_batch"},
        )
        == 3
    )
    assert (
        value(
            "kedro_stream_versions_total",
            {"query": "customer_history", "change": "opened"},
        )
        == 7
    )


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        pytest.param(
            {"sequence": "lsn"},
            "query customers (node current): has changes with sequence `lsn`, which "
            "the node's output does not have: did you mean `_lsn`?",
            id="the sequence misnamed",
        ),
        pytest.param(
            {"keys": ["customer_id"]},
            "query customers (node current): has changes with keys `customer_id`, "
            "which the node's output does not have: name one of its columns: id, "
            "name, city, _op, _lsn",
            id="a wrong key",
        ),
        pytest.param(
            {"delete": "_op = 'd'"},
            "'customers' has changes with `delete`, which is not one of its "
            "settings: did you mean `deletes`?",
            id="the delete marker misspelt",
        ),
    ],
)
def test_a_mistake_in_changes_is_refused_before_any_stream_starts(
    spark, tmp_path, monkeypatch, changes, problem
):
    from kedro_streaming import StreamingConfigError  # noqa: PLC0415

    monkeypatch.chdir(tmp_path)
    (tmp_path / "events").mkdir()
    (tmp_path / "events" / "0.json").write_text(debezium_event(change(1, 2, "c", "A")))
    with pytest.raises(StreamingConfigError) as refused:
        cdc_run(cdc_catalog(tmp_path, **changes))
    assert problem in str(refused.value)
    assert not (tmp_path / "customers").exists()  # nothing started, nothing made
