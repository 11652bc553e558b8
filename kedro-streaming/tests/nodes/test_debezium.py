"""Debezium's events as changes: each form Debezium writes, each problem named."""

from __future__ import annotations

import json

import pytest
from kedro_streaming import debezium_changes
from pyspark.sql import functions as F

ROW = "id INT NOT NULL, name STRING"
AFTER = {"id": 7, "name": "Ana"}


def event(op="u", before=None, after=AFTER, source=None, envelope=False) -> str:
    payload = {
        "op": op,
        "before": before,
        "after": after,
        "source": {"lsn": 120} if source is None else source,
        "ts_ms": 1_700_000_000_123,
    }
    return json.dumps({"schema": {}, "payload": payload} if envelope else payload)


@pytest.mark.parametrize(
    ("value", "sequence", "expected"),
    [
        pytest.param(
            event(), "source.lsn BIGINT", (7, "Ana", "u", 120, None), id="update"
        ),
        pytest.param(
            event(envelope=True),
            "source.lsn BIGINT",
            (7, "Ana", "u", 120, None),
            id="with its schema envelope",
        ),
        pytest.param(
            event("r"),
            "source.lsn BIGINT",
            (7, "Ana", "r", 120, None),
            id="snapshot read",
        ),
        pytest.param(
            event("d", before=AFTER, after=None),
            "source.lsn BIGINT",
            (7, "Ana", "d", 120, None),
            id="delete from its before image",
        ),
        pytest.param(
            event(),
            "ts_ms BIGINT",
            (7, "Ana", "u", 1_700_000_000_123, None),
            id="the event's ts_ms",
        ),
        pytest.param(
            None,
            "source.lsn BIGINT",
            (
                None,
                None,
                None,
                None,
                "tombstone (the delete event before it applied the change)",
            ),
            id="tombstone",
        ),
        pytest.param(
            event("t", after=None),
            "source.lsn BIGINT",
            (None, None, "t", 120, "unsupported operation 't' (truncate)"),
            id="truncate",
        ),
        pytest.param(
            event("d", before=None, after=None),
            "source.lsn BIGINT",
            (None, None, "d", 120, "no before image"),
            id="delete without its row",
        ),
        pytest.param(
            event(source={}),
            "source.lsn BIGINT",
            (7, "Ana", "u", None, "missing sequence source.lsn"),
            id="no sequence",
        ),
        pytest.param(
            event(after={"name": "Ana"}),
            "source.lsn BIGINT",
            (None, "Ana", "u", 120, "missing id"),
            id="no key",
        ),
        pytest.param(
            '{"id": 7}',
            "source.lsn BIGINT",
            (None, None, None, None, "not a Debezium change event"),
            id="not an event",
        ),
    ],
)
def test_each_event_is_a_change_or_names_why_not(spark, value, sequence, expected):
    events = spark.createDataFrame([(value,)], "value STRING")
    changes = debezium_changes(events, ROW, sequence)
    column = "_" + sequence.split()[0].rsplit(".", 1)[-1]
    row = changes.select("id", "name", "_op", column, "problems").first()
    assert tuple(row) == expected
    assert changes.first()["raw_payload"] == value


def test_avro_records_and_a_binlog_position_of_two_fields(spark):
    """Debezium's Avro converter, as a Kafka dataset with `avro:` decodes it
    (`value_record`, `value_problem`); MySQL's file and position."""
    record = (
        "STRUCT<op: STRING, before: STRUCT<id: INT, name: STRING>, "
        "after: STRUCT<id: INT, name: STRING>, "
        "source: STRUCT<file: STRING, pos: BIGINT>>"
    )
    events = spark.createDataFrame(
        [
            (("c", None, (7, "Ana"), ("mysql-bin.000003", 154)), None),
            (None, "not Avro: the first byte is not 0"),
        ],
        f"value_record {record}, value_problem STRING",
    ).withColumn("value", F.lit(None))
    changes = debezium_changes(events, ROW, "source.file STRING, source.pos BIGINT")
    rows = [
        tuple(r)
        for r in changes.select(
            "id", "name", "_op", "_file", "_pos", "problems"
        ).collect()
    ]
    assert rows == [
        (7, "Ana", "c", "mysql-bin.000003", 154, None),
        (None, None, None, None, None, "not Avro: the first byte is not 0"),
    ]


def test_a_sequence_that_is_no_list_of_fields_and_types_is_named(spark):
    events = spark.createDataFrame([(event(),)], "value STRING")
    with pytest.raises(ValueError, match="sequence 'source.lsn' is not a list of"):
        debezium_changes(events, ROW, "source.lsn")
