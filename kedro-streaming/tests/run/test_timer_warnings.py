"""A timer deleted as it fires: one line of the run's, not one of Spark's
per timer. Real Spark, at the WARN level a project's session has."""

import logging
import re
from pathlib import Path

import pytest
from kedro.io import DataCatalog
from kedro.pipeline import node, pipeline
from kedro.runner import SequentialRunner
from kedro_streaming._observe.timer_warnings import (
    DELETED_MISSING,
    TIMER_STATE_LOGGERS,
    count_deleted_timer_warnings,
)
from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F
from pyspark.sql.streaming import StatefulProcessor

from tests.helpers import SOURCE, registered, sink_in, streaming_hooks

KEYS = 20


class DeletesTheFiringTimer(StatefulProcessor):
    """Per key: a timer a minute after its event; when it fires, a row, and
    every timer of the key deleted, the firing one among them (Spark deletes
    that one again once this returns)."""

    def init(self, handle) -> None:
        self.handle = handle

    def handleInputRows(self, key, rows, timerValues):
        for row in rows:
            self.handle.registerTimer(row.at_ms + 60_000)
        return iter([])

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        for timer in self.handle.listTimers():
            self.handle.deleteTimer(timer)
        yield Row(key=key[0])


def fired(events: DataFrame) -> DataFrame:
    return (
        events.withWatermark("at", "1 minute")
        .select("key", "at", F.unix_millis("at").alias("at_ms"))
        .groupBy("key")
        .transformWithState(
            DeletesTheFiringTimer(), "key STRING", "Append", "EventTime"
        )
    )


@pytest.fixture
def printed(spark):
    """What Spark prints from now on, at the WARN level a project's session
    has: ``printed(text)`` counts the lines with ``text`` that reach the root
    logger's appenders (the console's). The JVM's stderr is not this
    process's: capfd cannot see it."""
    log4j = spark._jvm.org.apache.logging.log4j
    core = log4j.core
    context = log4j.LogManager.getContext(False)
    root = context.getConfiguration().getRootLogger()
    result = getattr(core, "Filter$Result")
    added = []

    def counter(text: str):
        name = f"test-printed-{len(added)}"
        appender = core.appender.CountingNoOpAppender(name, None)
        only = core.filter.StringMatchFilter.newBuilder().setMatchString(text)
        appender.addFilter(
            only.setOnMatch(result.ACCEPT).setOnMismatch(result.DENY).build()
        )
        appender.start()
        root.addAppender(appender, None, None)
        context.updateLoggers()
        added.append(name)
        return appender

    spark.sparkContext.setLogLevel("WARN")
    yield counter
    spark.sparkContext.setLogLevel("ERROR")
    for name in added:
        root.removeAppender(name)
    context.updateLoggers()


def test_a_timer_deleted_as_it_fires_is_one_line_of_the_run_not_one_a_timer(
    spark, printed, caplog
):
    here = Path.cwd()
    # KEYS keys at 10:00, each with a timer at 10:01; a last one at 12:00
    # moves the watermark past them, and they fire.
    lines = [f'{{"key": "k{i}", "at": "2024-03-01T10:00:00"}}' for i in range(KEYS)]
    lines.append('{"key": "last", "at": "2024-03-01T12:00:00"}')
    (here / "in" / "0.json").write_text("\n".join(lines) + "\n")
    catalog = DataCatalog.from_config(
        {
            "events": {
                **SOURCE,
                "filepath": str(here / "in"),
                "load_args": {"schema": "key STRING, at TIMESTAMP"},
            },
            "fired": sink_in(here, "fired"),
        }
    )
    nodes = pipeline([node(fired, "events", "fired", name="fired")])
    hooks = streaming_hooks(metrics_port=0, trigger="available_now")
    spark_lines = printed(DELETED_MISSING)
    with caplog.at_level(logging.WARNING, logger="kedro_streaming.queries"):
        hooks.before_pipeline_run({}, nodes, catalog)
        SequentialRunner().run(nodes, catalog, registered(hooks))
        hooks.after_pipeline_run({})

    assert spark.read.parquet(str(here / "fired")).count() == KEYS
    # Before: one "WARN TimerStateImpl: Failed to delete timer ..." line per
    # fired timer, KEYS of them.
    assert spark_lines.getCount() == 0
    ours = [r.getMessage() for r in caplog.records if DELETED_MISSING in r.getMessage()]
    assert len(ours) == 1
    # Said as soon as the run sees some: how many Spark had counted by then
    # depends on where its poll fell among the batch's timers (1 to KEYS).
    said = re.match(
        f"Spark's warning \"{DELETED_MISSING} for key=\\[...\\] and timestamp=... "
        'ms since it does not exist" came ([0-9]+) times? so far, and is not shown '
        "in this run: ",
        ours[0],
    )
    assert said and 1 <= int(said[1]) <= KEYS
    assert "delete no timer in handleExpiredTimer (docs/stateful.md)" in ours[0]


def test_only_that_warning_is_counted_and_only_while_counting(spark, printed):
    """Spark's other lines of the class are printed; the level is the
    root's; after ``stop``, Spark's lines are printed again."""
    (name, *_) = TIMER_STATE_LOGGERS
    timer_log = spark._jvm.org.slf4j.LoggerFactory.getLogger(name)
    missing = f"{DELETED_MISSING} for key=[k1] and timestamp=60000 ms since it ..."
    deleted = printed(DELETED_MISSING)
    other = printed("Failed to register timer")
    warnings = count_deleted_timer_warnings(spark)
    try:
        timer_log.warn(missing)
        timer_log.warn("Failed to register timer for key=[k1]: it already exists")
        spark.sparkContext.setLogLevel("ERROR")
        timer_log.warn(missing)  # below the root's level: neither counted nor shown
        spark.sparkContext.setLogLevel("WARN")
        assert warnings.count() == 1
        assert (deleted.getCount(), other.getCount()) == (0, 1)
    finally:
        warnings.stop()
    timer_log.warn(missing)
    assert (deleted.getCount(), other.getCount()) == (1, 1)
