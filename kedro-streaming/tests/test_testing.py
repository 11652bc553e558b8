"""The stream harness itself: what the pipelines' stream tests rely on."""

import importlib.util
import json
import re
import shutil
import sys
import time
from datetime import datetime, timedelta, timezone

import pandas as pd
import pytest
from kedro.pipeline import Pipeline, node
from kedro_streaming import debezium_changes
from kedro_streaming._observe.state_contents import state_records
from kedro_streaming.testing import _queries
from pyspark.sql import DataFrame
from pyspark.sql.functions import udf
from pyspark.sql.types import StringType


def count_per_key(events: DataFrame) -> DataFrame:
    return events.groupBy("key").count()


def test_complete_mode_gives_the_whole_table_and_names_are_checked(stream_test):
    with pytest.raises(ValueError, match=r"No value for inputs \['events'\]"):
        stream_test(count_per_key, streams={})
    counts = stream_test(
        count_per_key, streams={"events": "key STRING"}, output_mode="complete"
    )
    with pytest.raises(ValueError, match=r"\['other'\] are not streaming inputs"):
        counts.step(other=[("a",)])

    first = counts.step(events=pd.DataFrame({"key": ["a", "b", "a"]}))
    idle = counts.step()  # nothing new: no micro-batch, nothing written
    second = counts.step(events=[{"key": "b"}, {"key": None}])

    assert (first.rows, first.input_rows) == ([("a", 2), ("b", 1)], 3)
    assert (idle.rows, idle.batches, idle.input_rows) == ([], [], 0)
    assert (second.rows, second.input_rows) == ([(None, 1), ("a", 2), ("b", 2)], 2)
    assert second.state_rows == 3


def unique_events(events: DataFrame) -> DataFrame:
    return events.withWatermark("at", "10 minutes").dropDuplicatesWithinWatermark(
        ["id"]
    )


def at(minute: int) -> datetime:
    return datetime(2024, 3, 1, 10) + timedelta(minutes=minute)


def kept(state: list[dict]) -> dict[str, int]:
    """A dedupe's state: each id and the microsecond its key expires at."""
    assert {key for row in state for key in row} == {
        "key.id",
        "value.expiresAtMicros",
        "partition_id",
    }
    return {row["key.id"]: row["value.expiresAtMicros"] for row in state}


def expires(minute: int) -> int:
    """When an id seen at ``minute`` leaves the state: 10 minutes later."""
    moment = at(minute + 10).replace(tzinfo=timezone.utc)
    return int(moment.timestamp()) * 1_000_000


def test_each_stateful_operator_shows_its_state_and_what_a_step_removed(
    stream_test, spark, tmp_path
):
    dedupe = stream_test(unique_events, streams={"events": "id STRING, at TIMESTAMP"})
    # a twice in one batch, as a replayed message; then again in the next.
    first = dedupe.step(events=[("a", at(0)), ("a", at(0)), ("b", at(2))])
    # The state itself, read from the checkpoint: each id until its event
    # time plus the delay (its partition is Spark's hash: not compared).
    assert kept(dedupe.state()) == {"a": expires(0), "b": expires(2)}
    # c moves the watermark to 10:20, past a's and b's 10 minutes: both go.
    second = dedupe.step(events=[("a", at(0)), ("c", at(30))])
    assert kept(dedupe.state()) == {"c": expires(30)}
    # What changed since the first step: c kept in the step's batch with
    # data, a and b gone in the next, run for the watermark it moved.
    data = second.progress[0]["batchId"]
    since = dedupe.state(since=first.progress[-1]["batchId"])
    assert sorted((c["batch_id"], c["change_type"], c["key.id"]) for c in since) == [
        (data, "update", "c"),
        (data + 1, "delete", "a"),
        (data + 1, "delete", "b"),
    ]
    assert kept(dedupe.state(batch=0)) == {"a": expires(0), "b": expires(2)}
    # The same from a folder with a space and other letters (Spark's reader
    # alone fails there: "No committed batch found").
    moved = tmp_path / "My Streams" / "Données été"
    query = next(iter(dedupe._queries.values()))  # noqa: SLF001 (its checkpoint)
    shutil.copytree(query.checkpoint, moved)
    assert state_records(spark, str(moved)) == dedupe.state()
    # a once more, now behind the watermark: dropped as late, not emitted.
    third = dedupe.step(events=[("a", at(0))])

    assert [s.rows for s in (first, second, third)] == [
        [("a", at(0)), ("b", at(2))],
        [("c", at(30))],
        [],
    ]
    figures = [
        [
            (op.name, op.rows, op.rows_removed, op.late_rows_dropped)
            for op in s.operators
        ]
        for s in (first, second, third)
    ]
    assert figures == [
        [("dedupeWithinWatermark", 2, 0, 0)],
        [("dedupeWithinWatermark", 1, 2, 0)],
        [("dedupeWithinWatermark", 1, 0, 1)],
    ]
    # Not transformWithState: no timers, no time to live.
    assert {(op.timers_set, op.ttl_values_removed) for op in third.operators} == {
        (None, None)
    }
    assert (
        third.operators[0].memory_bytes
        == (third.progress[-1]["stateOperators"][0]["memoryUsedBytes"])
    )


@pytest.mark.parametrize(
    "replay", [pytest.param(True, id="replayed"), pytest.param(False, id="committed")]
)
def test_a_restart_resumes_from_the_checkpoint(stream_test, replay):
    counts = stream_test(
        count_per_key, streams={"events": "key STRING"}, output_mode="complete"
    )
    counts.step(events=[("a",)])
    last = counts.step(events=[("a",), ("b",)])
    counts.restart(replay_last_batch=replay)
    after = counts.step()

    if replay:  # the same batch, input and result again
        assert (after.rows, after.input_rows) == ([("a", 2), ("b", 1)], 2)
        assert after.progress[-1]["batchId"] == last.progress[-1]["batchId"]
    else:  # nothing new to run
        assert (after.rows, after.batches, after.input_rows) == ([], [], 0)


ROW = "id INT NOT NULL, name STRING"


def applied(events: DataFrame) -> DataFrame:
    changes = debezium_changes(events, ROW)
    return changes.where("problems IS NULL").select("id", "name", "_op", "_lsn")


def event(op: str, lsn: int, id: int, name: str | None = None) -> tuple[str]:
    image = {"id": id, "name": name}
    return (
        json.dumps(
            {
                "op": op,
                "before": image if op == "d" else None,
                "after": None if op == "d" else image,
                "source": {"lsn": lsn},
            }
        ),
    )


def test_changes_fed_step_by_step_show_each_table_and_what_became_of_them(
    stream_test,
):
    """A type 1 and a type 2 table kept by the plugin's own code, shown after
    each step: a snapshot, then an update and a key's update and delete in one
    batch, then late changes older than the row and than the delete."""
    tables = stream_test(
        Pipeline(
            [
                node(applied, "events", "current", name="current"),
                node(applied, "events", "history", name="history"),
            ]
        ),
        streams={"events": "value STRING"},
        changes={
            "current": {"keys": "id", "sequence": "_lsn"},
            "history": {"keys": "id", "sequence": "_lsn", "scd_type": 2},
        },
    )
    first = tables.step(events=[event("r", 1, 1, "Ana"), event("r", 2, 2, "Bo")])
    second = tables.step(
        events=[event("u", 5, 1, "Ann"), event("u", 4, 2, "Bea"), event("d", 6, 2)]
    )
    late = tables.step(events=[event("u", 3, 1, "Old"), event("u", 5, 2, "Zed")])

    current = [first["current"], second["current"], late["current"]]
    assert [[tuple(r) for r in s.table] for s in current] == [
        [(1, 1, "Ana"), (2, 2, "Bo")],  # the keys, the sequence, the others
        [(1, 5, "Ann")],
        [(1, 5, "Ann")],
    ]
    assert [s.changes for s in current] == [
        {"inserted": 2},
        {"updated": 1, "deleted": 1, "superseded_in_batch": 1},
        {"not_newer_than_row": 1, "older_than_remembered_delete": 1},
    ]
    history = late["history"]
    assert [tuple(r) for r in history.table] == [
        (1, 1, "Ana", 1, 3),  # ... and __start_at, __end_at
        (1, 3, "Old", 3, 5),
        (1, 5, "Ann", 5, None),
        (2, 2, "Bo", 2, 4),
        (2, 4, "Bea", 4, 5),
        (2, 5, "Zed", 5, 6),
    ]
    # Two versions opened in the past, and the two they cut short rewritten
    # (Ana's ended at 5, now 3; Bea's at 6, now 5); no current one closed.
    assert history.versions == {"opened": 2, "rewritten": 2}
    assert late["current"].rows == [(1, "Old", "u", 3), (2, "Zed", "u", 5)]


def test_a_changes_sink_naming_a_column_it_lacks_is_refused(stream_test):
    said = (
        "changes= of applied_output: has changes with keys `idd`, which the "
        "node's output does not have: did you mean `id`?"
    )
    with pytest.raises(ValueError, match=re.escape(said)):
        stream_test(
            applied,
            streams={"events": "value STRING"},
            changes={"keys": "idd", "sequence": "_lsn"},
        )


# A module as pytest imports a test module of a folder without __init__.py:
# by its path, under a name Spark's Python workers cannot import.
UNIMPORTABLE = """
from pyspark.sql import Row
from pyspark.sql.streaming import StatefulProcessor

class Echo(StatefulProcessor):
    def init(self, handle):
        pass

    def handleInputRows(self, key, rows, timerValues):
        yield Row(key=key[0])

def echoed(events):
    return events.groupBy("key").transformWithState(
        Echo(), "key STRING", "Append", "ProcessingTime"
    )
"""


def test_a_processor_spark_s_workers_cannot_import_is_said_with_the_fix(
    stream_test, tmp_path, monkeypatch
):
    (tmp_path / "test_unimportable.py").write_text(UNIMPORTABLE)
    spec = importlib.util.spec_from_file_location(
        "test_unimportable", tmp_path / "test_unimportable.py"
    )
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "test_unimportable", module)
    spec.loader.exec_module(module)
    query = stream_test(module.echoed, streams={"events": "key STRING"})
    with pytest.raises(RuntimeError) as failed:
        query.step(events=[("a",)])
    assert "No module named 'test_unimportable'" in str(failed.value)
    assert str(failed.value).endswith(
        "Spark's Python workers could not import 'test_unimportable', the module "
        "of a function or processor the query runs: they import it by name from "
        "the folder pytest runs in. Define it in your package (src/), or make "
        "the test's folder a package (an __init__.py in it and in each folder "
        "above it, up to where pytest runs)."
    )


@udf(StringType())
def asleep(value):
    time.sleep(3600)
    return value


@pytest.mark.parametrize(
    ("schema", "rows"),
    [
        pytest.param("key STRING", [("a",), ("é b",)], id="the-udf-s-column-alone"),
        pytest.param("key STRING, n INT", [("a", 1), ("é b", 2)], id="among-others"),
    ],
)
def test_a_python_udf_runs_over_the_step_s_files(stream_test, schema, rows):
    # Spark 4.2.0 hands an Arrow UDF a parquet scan's batches whole, and its
    # worker waited for ever for this one (SPARK-58241): the session works
    # around it. (A UDF of a module the workers import by name got through.)
    @udf(StringType())
    def shouted(value):
        return value.upper()

    query = stream_test(
        lambda events: events.withColumn("loud", shouted("key")),
        streams={"events": schema},
    )
    step = query.step(events=rows)
    assert step.rows == [(*row, row[0].upper()) for row in rows]


def test_a_step_whose_query_stalls_fails_saying_where_it_stood(
    stream_test, monkeypatch
):
    monkeypatch.setattr(_queries, "_STEP_TIMEOUT", 10)
    query = stream_test(
        lambda events: events.withColumn("slow", asleep("key")),
        streams={"events": "key STRING"},
    )
    with pytest.raises(RuntimeError) as stalled:
        query.step(events=[("a",)])
    assert re.fullmatch(
        r"query [0-9a-f-]{36} did not finish the step's batches within 10 s \(no "
        r"batch yet; Processing new data\): see the Python workers' and the "
        r"driver's output above for what it waited on\.",
        str(stalled.value),
    )
