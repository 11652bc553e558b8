"""A sink's schema or state changed between runs: accepted with a line when
a column is added, refused before the query starts otherwise."""

import glob
import logging
from datetime import datetime

import pandas as pd
import pytest
from kedro_streaming import SparkStreamingDataset, StreamingConfigError
from kedro_streaming._checks.sink_schemas import (
    planned_state_schemas,
    recorded_operator_count,
    state_problem,
)
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from tests.run.one_node import (
    catalog_of,
    dry_run,
    files_of,
    kedro_run,
    land,
)

FIX = (
    "`kedro streams reset out` (removes its table and checkpoint, and those of "
    "the streams that read it: the next run writes them all again), or write "
    "to a new table (another filepath and checkpoint)"
)


def streamed_rows(spark, tmp_path) -> list[tuple]:
    """The sink read back as the next pipeline's stream does, to the end."""
    source = SparkStreamingDataset(
        filepath=str(tmp_path / "out"), file_format="parquet"
    )
    query = (
        source.load()
        .writeStream.format("memory")
        .queryName("read_back")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    try:
        return sorted(tuple(row) for row in spark.table("read_back").collect())
    finally:
        spark.catalog.dropTempView("read_back")


TRIPS = "id INT, fare INT"


def test_an_added_column_is_written_noted_and_read_with_the_old_rows(
    spark, tmp_path, caplog
):
    land(tmp_path, "0.json", [{"id": 1, "fare": 10}])
    kedro_run(tmp_path, TRIPS, lambda trips: trips)
    land(tmp_path, "1.json", [{"id": 2, "fare": 20}])

    with_tip = lambda trips: trips.withColumn("tip", F.col("fare") * 10)  # noqa: E731
    line = (
        "'out' gains column tip (int): accepted (rows written before read it as null)."
    )
    # validate's dry run notes it, and finds no problem.
    assert dry_run(spark, catalog_of(tmp_path, TRIPS), with_tip) == ([line[:-1]], [])
    with caplog.at_level(logging.INFO, logger="kedro_streaming"):
        kedro_run(tmp_path, TRIPS, with_tip)
    assert [r.getMessage() for r in caplog.records if "gains" in r.getMessage()] == [
        line
    ]
    expected = [(1, 10, None), (2, 20, 200)]
    assert streamed_rows(spark, tmp_path) == expected
    # The readers docs/operating.md shows: Spark's batch reader, and pandas.
    batch = spark.read.option("mergeSchema", "true").parquet(str(tmp_path / "out"))
    assert sorted(tuple(row) for row in batch.collect()) == expected
    files = sorted(glob.glob(str(tmp_path / "out" / "*.parquet")))
    frame = pd.concat(map(pd.read_parquet, files)).sort_values("id")
    assert frame.astype(object).where(frame.notna(), None).to_dict("records") == [
        {"id": 1, "fare": 10, "tip": None},
        {"id": 2, "fare": 20, "tip": 200},
    ]

    # Written: nothing more to say.
    assert dry_run(spark, catalog_of(tmp_path, TRIPS), with_tip) == ([], [])


# Each change refused: the schema of `in`, the node of run 1, that of run 2,
# and the one line that refuses run 2.
def by_window(*keys):
    return lambda trips: (
        trips.withWatermark("at", "0 seconds")
        .groupBy(F.window("at", "1 hour"), *keys)
        .count()
        .select(F.col("window.start").alias("hour"), "borough", "count")
    )


REFUSED = {
    "retyped column": (
        TRIPS,
        lambda trips: trips,
        lambda trips: trips.withColumn("fare", F.col("fare").cast("string")),
        "'out' would no longer match its committed files: column fare was int, is "
        "now string. Fix: keep the committed columns and types in the node that "
        "writes it (or in the schema it parses by, e.g. a parameter), or "
        f"{FIX}.",
    ),
    "removed column": (
        TRIPS,
        lambda trips: trips,
        lambda trips: trips.select("id"),
        "'out' would no longer match its committed files: column fare (int) is no "
        "longer written. Fix: keep the committed columns and types in the node "
        "that writes it (or in the schema it parses by, e.g. a parameter), or "
        f"{FIX}.",
    ),
    "grouping key added": (
        "at TIMESTAMP, borough STRING, zone STRING",
        by_window("borough"),
        by_window("borough", "zone"),
        "'out' keeps state its checkpoint cannot resume: its aggregation "
        "(operator 0) kept the state key (window "
        "struct<start:timestamp,end:timestamp>, borough string), and would now "
        "keep (window struct<start:timestamp,end:timestamp>, borough string, zone "
        f"string). Fix: {FIX}.",
    ),
}


@pytest.mark.parametrize("case", REFUSED, ids=list(REFUSED))
def test_a_changed_schema_or_state_is_refused_before_the_query_starts(
    spark, tmp_path, case
):
    schema, first, second, message = REFUSED[case]
    record = {"id": 1, "fare": 10, "at": "2024-03-01 10:05:00", "borough": "Queens"}
    land(tmp_path, "0.json", [{**record, "zone": "JFK"}])
    kedro_run(tmp_path, schema, first)
    land(tmp_path, "1.json", [{**record, "id": 2, "zone": "Astoria"}])
    before = files_of(tmp_path / "out", tmp_path / "checkpoint")

    with pytest.raises(StreamingConfigError) as error:
        kedro_run(tmp_path, schema, second)
    assert str(error.value) == (
        "Streaming queries cannot start as the pipeline's nodes build them "
        "(`kedro streams validate` lists the same):\n"
        f"  - query out (node write): {message}"
    )
    assert files_of(tmp_path / "out", tmp_path / "checkpoint") == before
    # validate's dry run refuses it with the same words.
    problems = dry_run(spark, catalog_of(tmp_path, schema), second)[1]
    assert problems == [f"query out (node write): {message}"]


def unique_paid(events: DataFrame, payments: DataFrame) -> DataFrame:
    """Deduplicated events joined with their payments: two stateful operators,
    the join's schemas a level below the other's in the checkpoint."""
    unique = events.withWatermark("at", "10 minutes").dropDuplicatesWithinWatermark(
        ["id"]
    )
    paid = payments.withWatermark("paid_at", "10 minutes")
    return unique.join(
        paid,
        (unique.id == paid.pid)
        & paid.paid_at.between(unique.at, unique.at + F.expr("INTERVAL 5 MINUTES")),
    )


def test_a_join_after_a_dedupe_resumes_its_checkpoint(stream_test, tmp_path):
    """Found by a new user: the join's state was not counted, and the second
    run refused ("1 stateful operator(s), and the query now has 2")."""
    query = stream_test(
        unique_paid,
        streams={
            "events": "id STRING, at TIMESTAMP",
            "payments": "pid STRING, paid_at TIMESTAMP",
        },
    )
    start = datetime(2024, 3, 1, 10)
    query.step(events=[("a", start)], payments=[("a", start)])
    (checkpoint,) = glob.glob(str(tmp_path / "stream-0/checkpoints/*"))
    frame = next(iter(query._queries.values()))._frame  # noqa: SLF001 (the query's plan)
    assert recorded_operator_count(checkpoint) == len(planned_state_schemas(frame)) == 2
    assert state_problem(checkpoint, frame) is None
