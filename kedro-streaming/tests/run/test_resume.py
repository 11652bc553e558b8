"""What a change does to a query with a checkpoint, said before it starts:
the verdict `kedro streams validate` prints, and `kedro run` refusing exactly
the changes it says need a reset (and starting the others)."""

import contextlib

import pyspark
import pytest
from kedro_streaming import StreamingConfigError
from kedro_streaming._checkpoint import Checkpoint
from kedro_streaming._connectors.streams import OFFSET_LOG_FORMAT, SOURCE_EVOLUTION
from pyspark.sql import functions as F

from tests.run.one_node import (
    catalog_of,
    dry_run,
    files_of,
    kedro_run,
    land,
    verdict_of,
)

FIX = (
    "Fix: `kedro streams reset out` (removes its table and checkpoint, and "
    "those of the streams that read it: the next run writes them all again), "
    "or write to a new table (another filepath and checkpoint)"
)
TRIPS = "id INT, fare INT, at TIMESTAMP, borough STRING"
# A windowed query's run ends with a batch of no data (its watermark moved).
RESUMES = "query out: ok, resumes after batch {} with the changes noted"


def plain(trips):
    return trips


def windowed(size: str, delay: str = "10 minutes"):
    def summary(trips):
        return (
            trips.withWatermark("at", delay)
            .groupBy(F.window("at", size), "borough")
            .count()
            .select(F.col("window.start").alias("start"), "borough", "count")
        )

    return summary


def sessions(gap):
    """Trips per borough and session of ``gap`` (text, or a function making
    the Column of a gap per row)."""

    def summary(trips):
        return (
            trips.withWatermark("at", "10 minutes")
            .groupBy(F.session_window("at", gap() if callable(gap) else gap), "borough")
            .count()
            .select(F.col("session_window.start").alias("start"), "borough", "count")
        )

    return summary


def summed(fares: str):
    """Fares per borough and hour, as SQL ``fares`` computes them."""

    def summary(trips):
        return (
            trips.withWatermark("at", "10 minutes")
            .groupBy(F.window("at", "1 hour"), "borough")
            .agg(F.expr(fares).alias("fares"))
            .select(F.col("window.start").alias("start"), "borough", "fares")
        )

    return summary


def deduped(trips):
    return trips.withWatermark("at", "1 hour").dropDuplicatesWithinWatermark(["id"])


def both(trips, more_trips):
    return trips.unionByName(more_trips)


# Each change: the node of run 1 and of run 2, run 2's catalog (as
# `catalog_of` takes it), the verdict's line and its notes or its problem.
CHANGES = {
    "a filter added": (
        plain,
        lambda trips: trips.where("fare > 0"),
        {},
        "query out: ok, resumes as it is after batch 0",
        [],
    ),
    "a column added": (
        plain,
        lambda trips: trips.withColumn("tip", F.col("fare") * 10),
        {},
        RESUMES.format(0),
        [
            "'out' gains column tip (int): accepted (rows written before read it as null)"
        ],
    ),
    "a watermark's delay changed": (
        windowed("1 hour"),
        windowed("1 hour", delay="30 minutes"),
        {},
        RESUMES.format(1),
        [
            "'out' now keeps its watermark on `at` 30 minutes behind the latest "
            "event time, where it was 10 minutes: from its next batch (the "
            "watermark its checkpoint reached never goes back)"
        ],
    ),
    "the shuffle partitions changed": (
        windowed("1 hour"),
        windowed("1 hour"),
        {"conf": {"spark.sql.shuffle.partitions": "3"}},
        RESUMES.format(1),
        [
            "'out' keeps its checkpoint's 2 shuffle partitions (its state is split "
            "so): spark.sql.shuffle.partitions 3 applies to new checkpoints only"
        ],
    ),
    "a window's size changed": (
        windowed("1 hour"),
        windowed("30 minutes"),
        {},
        "'out' would now make `window` windows of 30 minutes over at, and its "
        "state holds windows of 1 hour over at: they would be finished and "
        f"written beside the new ones. {FIX}.",
        None,
    ),
    "a session's gap changed": (
        sessions("5 minutes"),
        sessions("10 minutes"),
        {},
        "'out' would now make `session_window` windows of 10 minutes over at, and "
        "its state holds windows of 5 minutes over at: they would be finished and "
        f"written beside the new ones. {FIX}.",
        None,
    ),
    "an aggregate computed otherwise": (
        summed("sum(fare)"),
        summed("sum(fare * 2)"),
        {},
        "'out' would now compute `fares` as sum((fare * 2)), and its state holds "
        "it as sum(fare): the groups open in its state would combine the two. "
        f"{FIX}.",
        None,
    ),
    "a dedupe added": (
        plain,
        deduped,
        {},
        "'out' keeps state its checkpoint cannot resume: its checkpoint holds the "
        "state of 0 stateful operator(s), and the query now has 1 "
        f"(deduplication). {FIX}.",
        None,
    ),
    "a source added": (
        plain,
        both,
        {"sources": ("in", "more")},
        "'out' now reads 'more': Spark refuses a source added or removed over a "
        "checkpoint (at the first batch). On Spark 4.2 and later, a query whose "
        "sources are named from its first start keeps its state when one is "
        'added or removed (docs/operating.md, "Change a running stream"). '
        f"{FIX}.",
        None,
    ),
    "the sink moved": (
        plain,
        plain,
        {"out": "elsewhere"},
        "'out' wrote to parquet {tmp}/out, and would now write to parquet "
        "{tmp}/elsewhere: its checkpoint counts what it wrote (batches 0 to 0) "
        "as written, so the new place would lack it. Fix: move parquet {tmp}/out "
        "there (its files and their log together), or `kedro streams reset out` "
        "(removes its table and checkpoint, and those of the streams that read "
        "it: the next run writes them all again), or write to a new table "
        "(another filepath and checkpoint).",
        None,
    ),
    "partitioned otherwise": (
        plain,
        plain,
        {"partitionBy": "borough"},
        "'out' was partitioned by nothing, and would now be by ['borough']: its "
        f"folder would hold both layouts. {FIX}.",
        None,
    ),
}


@pytest.mark.parametrize("change", CHANGES, ids=list(CHANGES))
def test_each_change_is_said_before_start_and_run_refuses_only_resets(
    spark, tmp_path, change
):
    first, second, catalog, said, notes = CHANGES[change]
    catalog = dict(catalog)
    trip = {"id": 1, "fare": 10, "at": "2024-03-01 10:05:00", "borough": "Queens"}
    land(tmp_path, "0.json", [trip])
    kedro_run(tmp_path, TRIPS, first)
    land(tmp_path, "1.json", [{**trip, "id": 2, "at": "2024-03-01 12:05:00"}])
    land(tmp_path, "0.json", [{**trip, "id": 3}], folder="more")
    conf = catalog.pop("conf", {})
    sources = catalog.get("sources", ("in",))
    with session_conf(spark, conf):
        verdict = verdict_of(
            spark, catalog_of(tmp_path, TRIPS, **catalog), second, sources
        )
        found = dry_run(spark, catalog_of(tmp_path, TRIPS, **catalog), second, sources)
        if notes is not None:
            assert (verdict, found) == (said, (notes, []))
            kedro_run(tmp_path, TRIPS, second, **catalog)  # Spark resumes it
            return
        problem = said.format(tmp=tmp_path)
        assert verdict == (
            "query out: needs a reset, said below: `kedro streams reset out`"
        )
        assert found == ([], [f"query out (node write): {problem}"])
        before = files_of(tmp_path / "out", tmp_path / "checkpoint")
        with pytest.raises(StreamingConfigError) as error:
            kedro_run(tmp_path, TRIPS, second, **catalog)
        assert str(error.value).endswith(f"  - query out (node write): {problem}")
        assert files_of(tmp_path / "out", tmp_path / "checkpoint") == before


# A gap per row: Queens' sessions close after 5 minutes, others' after 10.
def gap_per_row():
    return F.when(F.col("borough") == "Queens", "5 minutes").otherwise("10 minutes")


# How 0.16.1 and earlier recorded a session window: its time as the
# conversion around it, and a gap per row not at all.
RECORDED_BY_0_16_1 = {
    "a fixed gap": (sessions("5 minutes"), "5 minutes over precisetimestampconversion"),
    "a gap per row": (sessions(gap_per_row), " over precisetimestampconversion"),
}


@pytest.mark.parametrize("gap", RECORDED_BY_0_16_1, ids=list(RECORDED_BY_0_16_1))
def test_a_session_window_recorded_by_an_earlier_version_resumes(spark, tmp_path, gap):
    """An upgrade over a checkpoint whose record says a session window as
    0.16.1 did: the same query resumes; the next start records it whole."""
    node, recorded = RECORDED_BY_0_16_1[gap]
    trip = {"id": 1, "fare": 10, "at": "2024-03-01 10:05:00", "borough": "Queens"}
    land(tmp_path, "0.json", [trip])
    kedro_run(tmp_path, TRIPS, node)
    checkpoint = Checkpoint(str(tmp_path / "checkpoint"))
    record = checkpoint.record()
    now = record["windows"]["session_window"]
    assert now.endswith(" over at") and now != " over at"
    checkpoint.write_record({**record, "windows": {"session_window": recorded}})
    land(tmp_path, "1.json", [{**trip, "id": 2, "at": "2024-03-01 12:05:00"}])

    assert verdict_of(spark, catalog_of(tmp_path, TRIPS), node) == (
        "query out: ok, resumes as it is after batch 1"
    )
    kedro_run(tmp_path, TRIPS, node)
    assert checkpoint.record()["windows"] == {"session_window": now}


def deduped_both(trips, more_trips):
    marked = [each.withWatermark("at", "1 hour") for each in (trips, more_trips)]
    return marked[0].unionByName(marked[1]).dropDuplicatesWithinWatermark(["id"])


@pytest.mark.skipif(
    tuple(map(int, pyspark.__version__.split(".")[:2])) < (4, 2),
    reason="Spark names a query's sources from 4.2 on",
)
def test_named_sources_keep_the_state_when_a_source_is_added(spark, tmp_path):
    """Spark 4.2's source evolution, as a new project's spark.yml turns it
    on: a source added to a dedupe keeps what it saw; a checkpoint begun
    without it (or with it, then without) needs a reset, said before start."""
    evolution = {SOURCE_EVOLUTION: "true", OFFSET_LOG_FORMAT: "2"}
    trip = {"fare": 10, "at": "2024-03-01 10:05:00", "borough": "Queens"}
    for root in (tmp_path / "named", tmp_path / "unnamed"):
        land(root, "0.json", [{**trip, "id": 1}, {**trip, "id": 2}])
        land(root, "0.json", [{**trip, "id": 2}, {**trip, "id": 3}], folder="more")
    kedro_run(tmp_path / "unnamed", TRIPS, deduped)
    with session_conf(spark, evolution):
        kedro_run(tmp_path / "named", TRIPS, deduped)
        two = {"sources": ("in", "more")}
        catalog = catalog_of(tmp_path / "named", TRIPS, **two)
        assert verdict_of(
            spark, catalog, deduped_both, two["sources"]
        ) == RESUMES.format(1)
        assert dry_run(spark, catalog, deduped_both, two["sources"]) == (
            [
                "'out' now reads 'more': its state is kept (Spark's named sources), "
                "and a new source is read from its starting offsets"
            ],
            [],
        )
        kedro_run(tmp_path / "named", TRIPS, deduped_both, **two)
        # Trip 2, seen in the first run, is not written again.
        written = spark.read.parquet(str(tmp_path / "named" / "out"))
        assert sorted(row.id for row in written.collect()) == [1, 2, 3]
        assert dry_run(spark, catalog_of(tmp_path / "unnamed", TRIPS), deduped) == (
            [],
            [
                "query out (node write): 'out' has a checkpoint that began without "
                f"named sources, and `{SOURCE_EVOLUTION}` is now true in "
                'conf/base/spark.yml: Spark would fail at the first batch ("batch '
                "N doesn't exist\"). Remove it, or start this query afresh. "
                f"{FIX}."
            ],
        )
    assert dry_run(spark, catalog, deduped_both, two["sources"])[1] == [
        "query out (node write): 'out' has a checkpoint that logs its sources by "
        f"name, and `{SOURCE_EVOLUTION}` is no longer true in conf/base/spark.yml: "
        "Spark would fail at the first batch. Put it back, with the offset log's "
        f"format version 2. {FIX}."
    ]


@contextlib.contextmanager
def session_conf(spark, settings: dict[str, str]):
    """The session's SQL settings changed for a while."""
    previous = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in previous.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)
