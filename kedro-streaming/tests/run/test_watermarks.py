"""Watermarks that cannot go silent: a table read back carries no watermark
of the stream that wrote it, a mark kept anyway is refused under a stateful
operator, and one watermark over a union of streams is said before start."""

import json
from datetime import datetime

import pytest
from kedro.io import DataCatalog
from kedro_streaming._checks.stateful import redefined_watermark_problem
from kedro_streaming._checks.watermarks import (
    inherited_watermark_problem,
    union_watermark_note,
)
from kedro_streaming._connectors.streams import WATERMARK_KEY, drop_watermark
from pyspark.sql import functions as F

# Five orders from 10:00 to 10:04 (one sent twice), then one at 10:30, which
# takes a 10-minute watermark past the window [10:00, 10:10).
ORDERS = [f"2026-11-26T10:0{i}:00" for i in (0, 1, 2, 3, 4, 4)] + [
    "2026-11-26T10:30:00"
]


def entries(root, keep: bool | None = None) -> dict:
    """Orders landing as JSON, their deduplicated table, and that table read
    back as the source of a windowed count."""
    read_back = {"keep_watermark": keep} if keep is not None else {}
    return {
        "orders": {
            "type": "kedro_streaming.SparkStreamingDataset",
            "filepath": str(root / "landing"),
            "file_format": "json",
            "load_args": {"schema": "id INT, at TIMESTAMP"},
        },
        "unique_orders": {
            "type": "kedro_streaming.SparkStreamingDataset",
            "filepath": str(root / "unique_orders"),
            "file_format": "parquet",
            "save_args": {"checkpoint": str(root / "checkpoints/unique_orders")},
        },
        "unique_orders_read_back": {
            "type": "kedro_streaming.SparkStreamingDataset",
            "filepath": str(root / "unique_orders"),
            "file_format": "parquet",
            "load_args": read_back,
        },
        "orders_per_window": {
            "type": "kedro_streaming.SparkStreamingDataset",
            "filepath": str(root / "orders_per_window"),
            "file_format": "parquet",
            "save_args": {"checkpoint": str(root / "checkpoints/orders_per_window")},
        },
    }


def per_window(orders, watermark: bool = True):
    if watermark:
        orders = orders.withWatermark("at", "10 minutes")
    return (
        orders.groupBy(F.window("at", "10 minutes"))
        .count()
        .select(F.col("window.start").alias("start"), "count")
    )


@pytest.fixture(scope="module")
def written(spark, tmp_path_factory):
    """The orders, deduplicated by a stream with a watermark into a parquet
    table: the folder holding both."""
    root = tmp_path_factory.mktemp("orders")
    (root / "landing").mkdir()
    (root / "landing/0.json").write_text(
        "".join(
            json.dumps({"id": i, "at": at}) + "\n" for i, at in enumerate(ORDERS)
        ).replace('"id": 5', '"id": 4')  # the copy of order 4
    )
    catalog = DataCatalog.from_config(entries(root))
    unique = (
        catalog["orders"]
        .load()
        .withWatermark("at", "10 minutes")
        .dropDuplicates(["id"])
    )
    catalog["unique_orders"].start(
        unique, trigger={"availableNow": True}
    ).awaitTermination()
    # What Spark wrote keeps the writer's watermark on `at`.
    written_schema = spark.read.parquet(str(root / "unique_orders")).schema
    assert WATERMARK_KEY in written_schema["at"].metadata
    return root


def test_a_table_read_back_is_counted_by_a_watermark_of_the_reader(written):
    """Read back without its writer's mark: the reader's own withWatermark is
    its one watermark, which advances, and append mode writes the window."""
    catalog = DataCatalog.from_config(entries(written))
    orders = catalog["unique_orders_read_back"].load()
    assert orders.schema["at"].metadata == {}
    counted = per_window(orders)
    assert redefined_watermark_problem(orders.sparkSession, counted) is None
    assert inherited_watermark_problem(counted) is None
    catalog["orders_per_window"].start(
        counted, trigger={"availableNow": True}
    ).awaitTermination()
    rows = orders.sparkSession.read.parquet(str(written / "orders_per_window"))
    assert sorted(map(tuple, rows.collect())) == [(datetime(2026, 11, 26, 10, 0), 5)]


def test_a_watermark_kept_from_the_writer_is_refused_under_a_stateful_operator(
    written,
):
    """``keep_watermark: true``: the mark is there, which no query reading the
    table advances: a windowed count on it is refused, a second watermark too
    (with what to do for a table read back)."""
    catalog = DataCatalog.from_config(entries(written, keep=True))
    orders = catalog["unique_orders_read_back"].load()
    assert orders.schema["at"].metadata == {WATERMARK_KEY: 600000}
    assert inherited_watermark_problem(orders) is None  # no state: no harm
    assert inherited_watermark_problem(per_window(orders, watermark=False)) == (
        "its aggregation rests on the watermark of `at`, inherited from "
        f"FileSource[{written / 'unique_orders'}], which a stream with "
        "withWatermark wrote: this query never advances that watermark, so its "
        "state would grow for ever and append mode would write nothing, without an "
        'error. Fix: `.withWatermark("at", <delay>)` where the node reads it (and '
        "drop `keep_watermark: true` from that source's load_args, if set: the "
        "plugin reads a table without its writer's watermark)"
    )
    assert "no `keep_watermark: true` in the source's load_args" in (
        redefined_watermark_problem(orders.sparkSession, per_window(orders))
    )


def test_keep_watermark_takes_true_or_false(tmp_path):
    catalog = DataCatalog.from_config(entries(tmp_path, keep="yes"))
    assert catalog["unique_orders_read_back"].key_problems() == [
        "has `keep_watermark: yes` in its load_args: use true or false"
    ]


def test_a_marked_column_loses_its_mark_and_keeps_its_other_metadata(spark):
    marked = spark.createDataFrame([(1,)], "at INT").withMetadata(
        "at", {WATERMARK_KEY: 1000, "comment": "order time"}
    )
    assert drop_watermark(marked).schema["at"].metadata == {"comment": "order time"}


@pytest.mark.parametrize(
    ("where", "noted"),
    [("over the union", True), ("on each stream", False), ("no state", False)],
)
def test_one_watermark_over_a_union_of_streams_is_said_before_start(
    spark, tmp_path, where, noted
):
    streams = []
    for name in ("orders", "pickups"):
        (tmp_path / name).mkdir()
        stream = spark.readStream.schema("id INT, at TIMESTAMP").json(
            str(tmp_path / name)
        )
        if where == "on each stream":
            stream = stream.withWatermark("at", "10 minutes")
        streams.append(stream)
    events = streams[0].unionByName(streams[1])
    if where in ("over the union", "no state"):
        events = events.withWatermark("at", "10 minutes")
    if where != "no state":
        events = events.groupBy("id").agg(F.max("at"))
    note = union_watermark_note(events)
    if not noted:
        assert note is None
        return
    assert note == (
        "sets one watermark over a union of the streams reading "
        f"FileSource[{tmp_path / 'orders'}] and FileSource[{tmp_path / 'pickups'}]: "
        "it follows the newest event time of either, so the rows of the stream that "
        "runs behind (fewer events, or later to arrive) come later than the delay "
        "and are dropped as late rows, counted but not written. Give each stream "
        "its own withWatermark before the union: the query's watermark is then the "
        "slower stream's (spark.sql.streaming.multipleWatermarkPolicy: min, Spark's "
        "default) (docs/stateful.md)"
    )
