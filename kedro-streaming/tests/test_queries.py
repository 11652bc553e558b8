import json
import logging
import os
import re
import socket
import subprocess
import sys
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from urllib.request import urlopen

import pyspark
import pytest
from kedro.framework.hooks.manager import _create_hook_manager
from kedro.io import DataCatalog
from kedro.pipeline import node, pipeline
from kedro.runner import SequentialRunner
from kedro_streaming import (
    SparkStreamingDataset,
    StreamingConfigError,
    StreamingQueryHooks,
)
from kedro_streaming._connectors.delta import (
    check_delta_package,
)
from kedro_streaming._run import jvm, packages
from kedro_streaming._run.catalog import check_paths_reach_the_cluster
from kedro_streaming._run.checks import run_trigger
from kedro_streaming._run.console import run_console
from kedro_streaming._run.jvm import (
    _claim_recording,
    _prune_class_archives,
    _record_installation,
    class_archive,
)
from kedro_streaming._run.metrics import StreamMetrics
from kedro_streaming._run.packages import (
    check_kafka_connector,
    remember_resolution,
    without_resolution,
)
from kedro_streaming._run.progress import ProgressLog
from kedro_streaming._run.realtime import (
    check_real_time,
    check_real_time_intervals,
    check_real_time_task_slots,
    real_time_plan_problem,
)
from kedro_streaming._run.state import StreamState
from kedro_streaming.devtools.processes import DEFAULT_PORTS, port_is_free
from prometheus_client.parser import text_string_to_metric_families
from pyspark.sql import functions as F
from rich.logging import RichHandler

DATASET = "kedro_streaming.SparkStreamingDataset"
SOURCE = {
    "type": DATASET,
    "filepath": "in",
    "file_format": "json",
    "load_args": {"schema": "id INT"},
}


@pytest.fixture(autouse=True)
def in_a_folder_of_its_own(tmp_path_factory, monkeypatch):
    """Each test in a folder of its own, where the source folder `in` is."""
    folder = tmp_path_factory.mktemp("cwd")
    (folder / "in").mkdir()
    monkeypatch.chdir(folder)


def sink(name: str, **save_args) -> dict:
    return {
        "type": DATASET,
        "filepath": name,
        "file_format": "parquet",
        "save_args": {"checkpoint": f"data/checkpoints/{name}", **save_args},
    }


def kafka(**load_args) -> dict:
    return {"type": DATASET, "file_format": "kafka", "load_args": load_args}


def streaming_hooks(**settings) -> StreamingQueryHooks:
    """The run's hooks, as after a context whose streaming.yml is ``settings``."""
    hooks = StreamingQueryHooks()
    hooks.after_context_created(
        type("Context", (), {"config_loader": {"streaming": settings}})
    )
    return hooks


def registered(hooks: StreamingQueryHooks):
    """A hook manager with ``hooks``, for a runner to drive as Kedro's does."""
    manager = _create_hook_manager()
    manager.register(hooks)
    return manager


# One bad configuration each: the catalog, then what the message must say.
BAD_CONFIGURATIONS = {
    "sink without checkpoint": (
        {"out": {"type": DATASET, "filepath": "out", "file_format": "parquet"}},
        "'out' has no checkpoint: add `save_args: {checkpoint: data/checkpoints/<name>}`",
    ),
    "two sinks, one checkpoint": (
        {"out": sink("out"), "copy": sink("copy", checkpoint="data/checkpoints/out")},
        "copy, out share the checkpoint 'data/checkpoints/out': give each sink its own",
    ),
    "file source without schema": (
        {
            "in": {"type": DATASET, "filepath": "in", "file_format": "json"},
            "out": sink("out"),
        },
        "'in' reads json files from 'in' without a schema: add `load_args: {schema:",
    ),
    "Kafka source without bootstrap servers": (
        {"in": kafka(subscribe="trips"), "out": sink("out")},
        "'in' reads or writes Kafka without bootstrap servers: add "
        "`kafka.bootstrap.servers: host:9092` to its load_args",
    ),
    "Kafka source without topic": (
        {
            "in": kafka(**{"kafka.bootstrap.servers": "localhost:9092"}),
            "out": sink("out"),
        },
        "'in' reads Kafka without a topic: add `load_args: {subscribe: <topic>}`",
    ),
    "Real-Time Mode into a file sink": (
        {"out": sink("out", output_mode="update", trigger={"realTime": "1 minute"})},
        "'out' runs in Real-Time Mode (trigger realTime), which writes to Kafka in "
        "output mode update only",
    ),
    "unknown output mode": (
        {"out": sink("out", output_mode="upsert")},
        "'out' has output_mode 'upsert': use one of append, complete, update",
    ),
    "secret in the catalog": (
        {
            "in": kafka(
                **{
                    "kafka.bootstrap.servers": "localhost:9092",
                    "subscribe": "trips",
                    "kafka.sasl.jaas.config": "... password='hunter2';",
                }
            ),
            "out": sink("out"),
        },
        "'in' has the secret option 'kafka.sasl.jaas.config' in its load_args: move it to "
        "an entry of conf/<env>/credentials.yml",
    ),
    "append-only Delta sink in update mode": (
        {"out": {**sink("out", output_mode="update"), "file_format": "delta"}},
        "'out' has output_mode 'update', which a delta sink does not support",
    ),
    "merge_on outside Delta": (
        {"out": sink("out", output_mode="update", merge_on=["id"])},
        "'out' has merge_on, which upserts into a Delta table: give it "
        "`file_format: delta`",
    ),
    "unknown trigger": (
        {"out": sink("out", trigger={"every": "1 minute"})},
        "'out' has trigger {'every': '1 minute'}: use one of 'processingTime: ...'",
    ),
}


@pytest.mark.parametrize("case", BAD_CONFIGURATIONS)
def test_bad_configuration_fails_before_any_query_starts(case):
    config, message = BAD_CONFIGURATIONS[case]
    catalog = DataCatalog.from_config({"in": SOURCE, **config})
    nodes = pipeline(
        [
            node(
                lambda df: [df] * (len(config) - ("in" in config)),
                "in",
                [name for name in config if name != "in"],
            )
        ]
    )
    hooks = streaming_hooks()

    with pytest.raises(StreamingConfigError, match="cannot work") as error:
        hooks.before_pipeline_run({}, nodes, catalog)
    assert message in str(error.value) and "hunter2" not in str(error.value)
    assert all(catalog[name].query is None for name in config if name != "in")


@pytest.mark.parametrize("spark_version", ["4.0.0", "4.0.2", "4.1.1", "4.2.0", "4.3.0"])
def test_kafka_connector_must_match_the_running_spark(spark_version):
    for wrong in ("3.5.1", "4.1.1" if spark_version != "4.1.1" else "4.2.0"):
        packages = f"org.apache.spark:spark-sql-kafka-0-10_2.13:{wrong}"
        with pytest.raises(StreamingConfigError) as error:
            check_kafka_connector(packages, spark_version, "2.13")
        message = str(error.value)
        assert f"spark-sql-kafka-0-10_2.13:{wrong}, but the running Spark is" in message
        assert f"{spark_version} built for Scala 2.13" in message
        assert f"org.apache.spark:spark-sql-kafka-0-10_2.13:{spark_version}" in message

    check_kafka_connector(
        f"org.apache.spark:spark-sql-kafka-0-10_2.13:{spark_version}",
        spark_version,
        "2.13",
    )
    # A Spark Connect server's connector is fixed where the server starts.
    with pytest.raises(StreamingConfigError, match="Fix: restart the server with"):
        check_kafka_connector(
            "org.apache.spark:spark-sql-kafka-0-10_2.12:3.5.1",
            spark_version,
            None,
            fix="restart the server with",
        )


# Each Spark line this project runs on, with the Delta package made for it
# (Maven Central POMs: a line-suffixed artifact is built for its line, an
# unsuffixed one per DELTA_BUILT_FOR). 4.0.1, 4.0.2 and 4.3.x are here too:
# the checks hold for every release of a line, tested end to end or not.
DELTA_FOR_SPARK = {
    "4.0.0": "io.delta:delta-spark_4.0_2.13:4.4.0",
    "4.0.2": "io.delta:delta-spark_4.0_2.13:4.4.0",
    "4.1.1": "io.delta:delta-spark_4.1_2.13:4.4.0",
    "4.2.0": "io.delta:delta-spark_4.2_2.13:4.4.0",
}


@pytest.mark.parametrize("spark_version", [*DELTA_FOR_SPARK, "4.3.0"])
def test_delta_package_must_be_built_for_the_running_spark(spark_version):
    right = DELTA_FOR_SPARK.get(spark_version)
    line = spark_version.rsplit(".", 1)[0]
    if right:
        check_delta_package(
            f"org.apache.spark:spark-sql-kafka-0-10_2.13:{spark_version},{right}",
            spark_version,
            "2.13",
        )
    # The same Delta release built for another Spark line, suffixed or not.
    for wrong, built_for in (
        ("io.delta:delta-spark_2.13:3.2.0", "3.5"),
        ("io.delta:delta-spark_2.13:4.3.0", "4.1"),
        ("io.delta:delta-spark_2.13:4.4.0", "4.2"),
        ("io.delta:delta-spark_4.0_2.13:4.4.0", "4.0"),
        ("io.delta:delta-spark_4.1_2.13:4.4.0", "4.1"),
    ):
        if built_for == line:
            check_delta_package(wrong, spark_version, "2.13")
            continue
        with pytest.raises(StreamingConfigError) as error:
            check_delta_package(wrong, spark_version, "2.13")
        message = str(error.value)
        assert f"{wrong}, built for Spark {built_for}" in message
        assert f"running Spark is {spark_version} built for Scala 2.13" in message
        assert (
            f"Fix: set spark.jars.packages in the environment's spark.yml to {right} ("
            if right
            else f"a Delta release built for Spark {line}; this project knows none"
        ) in message


def test_a_metrics_port_taken_or_not_a_port_fails_before_any_query_starts(spark):
    # Absolute: the queries' plans are built first, and Spark's relative
    # paths start where it started.
    source = {**SOURCE, "filepath": str(Path("in").resolve())}
    catalog = DataCatalog.from_config({"in": source, "out": sink("out")})
    nodes = pipeline([node(lambda frame: frame, "in", "out")])
    with socket.socket() as taken:  # as by another run
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for setting, words in (
            (port, f"at 127.0.0.1:{port} (Address already in use): run with "),
            ("ninety", "metrics_port 'ninety' in streaming.yml is not a port"),
        ):
            hooks = streaming_hooks(metrics_port=setting)

            with pytest.raises(StreamingConfigError, match=re.escape(words)):
                hooks.before_pipeline_run({}, nodes, catalog)
    assert catalog["out"].query is None


def test_the_default_ports_are_held_while_the_tests_run(default_ports_held):
    """conftest.py holds them (or another process does): a test that took
    one would fail."""
    free = [port for port in DEFAULT_PORTS if port_is_free(port)]
    assert free == [], f"held by this session: {default_ports_held}"


def test_a_stream_without_a_sink_fails_before_any_query_starts():
    """An output of the run's streams with no catalog entry would stay in memory."""
    catalog = DataCatalog.from_config({"in": SOURCE})
    nodes = pipeline([node(lambda df: df, "in", "live_summary")])
    hooks = StreamingQueryHooks()
    with pytest.raises(StreamingConfigError, match="No sink for 'live_summary'"):
        hooks.before_pipeline_run({}, nodes, catalog)


def watermarked(frame, delay):
    return frame.withWatermark("at", delay)


def counted(frame):
    return frame.groupBy("id").count()


# A second node that cannot start its query, and the problem's line (Spark's
# reason after the node's name).
BROKEN_SECOND_NODES = {
    "invalid watermark delay from a parameter": (
        node(watermarked, ["in", "params:delay"], "second", name="b_watermark"),
        "query second: node b_watermark fails: [CANNOT_PARSE_INTERVAL] Unable to "
        "parse '10 minuets'. Please ensure that the value provided is in a valid "
        "format for defining an interval. You can reference the documentation for "
        "the correct format. If the issue persists, please double check that the "
        "input value is not null or empty and try again. SQLSTATE: 22006 (the "
        "value of params:delay)",
    ),
    "aggregation without watermark in append mode": (
        node(counted, "in", "second", name="b_count"),
        "query second (node b_count): [STREAMING_OUTPUT_MODE.UNSUPPORTED_OPERATION] "
        "Invalid streaming output mode: append. This output mode is not supported "
        "for streaming aggregations without watermark on streaming DataFrames/"
        "DataSets. SQLSTATE: 42KDE Fix: in the node, `.withWatermark(<event-time "
        "column>, <delay>)` before the aggregation (append writes a window once the "
        "watermark passes it), or give the sink `output_mode: update` or `complete`",
    ),
}


@pytest.mark.parametrize("case", BROKEN_SECOND_NODES)
def test_a_node_mistake_fails_the_run_before_any_query_starts(spark, case):
    """`kedro run` builds every query before the first starts, as `validate`
    does: the first query would start and write its checkpoint, then the
    second node fail with a long trace."""
    second, line = BROKEN_SECOND_NODES[case]
    here = Path.cwd()  # absolute: Spark's relative paths start where it started
    catalog = DataCatalog.from_config(
        {
            "in": {
                **SOURCE,
                "filepath": str(here / "in"),
                "load_args": {"schema": "id INT, at TIMESTAMP"},
            },
            **{
                name: {
                    **sink(name),
                    "filepath": str(here / name),
                    "save_args": {"checkpoint": str(here / "checkpoints" / name)},
                }
                for name in ("first", "second")
            },
        },
    )
    catalog["params:delay"] = "10 minuets"
    nodes = pipeline([node(lambda frame: frame, "in", "first", name="a_copy"), second])
    hooks = streaming_hooks(metrics_port=0)
    hook_manager = registered(hooks)

    with pytest.raises(StreamingConfigError) as error:
        try:  # as KedroSession.run drives the hooks and the runner
            hooks.before_pipeline_run({}, nodes, catalog)
            SequentialRunner().run(nodes, catalog, hook_manager)
        except Exception as failure:
            hooks.on_pipeline_error(failure, {})
            raise
    assert str(error.value) == (
        "Streaming queries cannot start as the pipeline's nodes build them "
        f"(`kedro streams validate` lists the same):\n  - {line}"
    )
    assert catalog["first"].query is None
    assert sorted(path.name for path in here.iterdir()) == ["in"]


def test_each_node_runs_once_and_the_run_starts_what_was_checked(spark):
    """The dry run's DataFrames are the run's: a node runs once, unless it
    reads a sink of the same run, which the dry run read as a stand-in (the
    run reads it once written). The nodes' functions are theirs again after."""
    here = Path.cwd()
    (here / "in" / "0.json").write_text('{"id": 1}\n{"id": 2}\n')
    catalog = DataCatalog.from_config(
        {
            "in": {**SOURCE, "filepath": str(here / "in")},
            **{
                name: {
                    **sink(name),
                    "filepath": str(here / name),
                    "save_args": {"checkpoint": str(here / "checkpoints" / name)},
                }
                for name in ("first", "second")
            },
        },
    )
    calls = Counter()

    def counting(step):
        def function(frame):
            calls[step] += 1
            return frame.withColumn(step, F.lit(calls[step]))

        function.__name__ = step
        return function

    nodes = pipeline(
        [
            node(counting("typed"), "in", "typed", name="typed"),
            node(counting("checked"), "typed", "first", name="checked"),
            node(counting("copied"), "first", "second", name="copied"),
        ]
    )
    functions = [each.func for each in nodes.nodes]
    hooks = streaming_hooks(metrics_port=0, trigger="available_now")
    hook_manager = registered(hooks)
    hooks.before_pipeline_run({}, nodes, catalog)
    SequentialRunner().run(nodes, catalog, hook_manager)
    hooks.after_pipeline_run({})

    assert calls == {"typed": 1, "checked": 1, "copied": 2}
    assert [each.func for each in nodes.nodes] == functions
    # What was checked is what ran: the dry run's columns (call 1), and
    # `copied` as the run built it, on what `first` holds (call 2).
    rows = sorted(
        tuple(row) for row in spark.read.parquet(str(here / "second")).collect()
    )
    assert rows == [(1, 1, 1, 2), (2, 1, 1, 2)]


@pytest.fixture
def console(monkeypatch, capsys):
    """The root logger with a rich handler, as Kedro's logging.yml sets it,
    and stdout not a terminal (captured, as a file or a CI log): what a run
    changes."""
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [*root.handlers, RichHandler()])
    monkeypatch.setattr(sys, "excepthook", lambda *error: handed_on.append(error))
    handed_on = []
    return root, handed_on


def test_creating_a_context_leaves_the_console_alone(console):
    """`kedro viz`, `kedro catalog` or a notebook create a context too."""
    root, _ = console
    handlers, excepthook = list(root.handlers), sys.excepthook
    streaming_hooks()
    assert root.handlers == handlers and sys.excepthook is excepthook


def test_a_run_changes_the_console_while_it_runs_and_puts_it_back(
    spark, console, capsys
):
    root, _ = console
    handlers, excepthook = list(root.handlers), sys.excepthook
    here = Path.cwd()
    (here / "in" / "0.json").write_text('{"id": 1}\n')
    catalog = DataCatalog.from_config(
        {
            "in": {**SOURCE, "filepath": str(here / "in")},
            "out": {
                **sink("out"),
                "filepath": str(here / "out"),
                "save_args": {"checkpoint": str(here / "checkpoints/out")},
            },
        }
    )
    during = []

    def copy(frame):
        during.append((list(root.handlers), sys.excepthook))
        return frame

    nodes = pipeline([node(copy, "in", "out")])
    hooks = streaming_hooks(metrics_port=0, trigger="available_now")
    hooks.before_pipeline_run({}, nodes, catalog)
    SequentialRunner().run(nodes, catalog, registered(hooks))
    hooks.after_pipeline_run({})

    assert root.handlers == handlers and sys.excepthook is excepthook
    # While it ran (the dry run of its checks among it): one line per event.
    run_handlers, run_excepthook = during[0]
    assert not any(isinstance(each, RichHandler) for each in run_handlers)
    assert run_excepthook is not excepthook
    assert re.search(
        r"^\S+ \S+ INFO kedro_streaming\.queries: Checked the streaming "
        r"configuration in .+ 1 sources, 1 sinks\.$",
        capsys.readouterr().out,
        re.MULTILINE,
    )


def test_a_run_that_fails_its_checks_prints_the_error_in_one_line(console, capsys):
    """Python prints the error once the run is over, at exit: the short form
    is still in place then; any other error goes on to the hook before it."""
    root, handed_on = console
    handlers, excepthook = list(root.handlers), sys.excepthook
    config, message = BAD_CONFIGURATIONS["sink without checkpoint"]
    catalog = DataCatalog.from_config({"in": SOURCE, **config})
    hooks = streaming_hooks()

    with pytest.raises(StreamingConfigError) as error:
        hooks.before_pipeline_run({}, pipeline([node(len, "in", "out")]), catalog)
    assert root.handlers == handlers
    sys.excepthook(StreamingConfigError, error.value, error.tb)
    assert capsys.readouterr().err == f"StreamingConfigError: {error.value}\n"
    assert message in str(error.value)
    other = ValueError("not the run's")
    sys.excepthook(ValueError, other, None)
    assert handed_on == [(ValueError, other, None)]
    # The next run that ends well puts the hook before them back.
    run_console()(False)
    assert sys.excepthook is excepthook


def test_relative_paths_are_refused_when_spark_is_elsewhere():
    paths = {
        "bronze": ["s3a://bucket/bronze", "data/checkpoints/bronze"],
        "zones": ["/mnt/shared/zones.csv"],
        "summary": ["file:///mnt/shared/summary", "hdfs:///checkpoints/summary"],
    }
    with pytest.raises(StreamingConfigError) as error:
        check_paths_reach_the_cluster(paths, "the cluster spark://m:7077", "prod")
    message = str(error.value)
    assert "the cluster spark://m:7077" in message
    assert "'bronze': 'data/checkpoints/bronze'" in message
    assert message.count("\n  - ") == 1  # the only relative one
    assert "conf/prod/globals.yml" in message

    del paths["bronze"]
    check_paths_reach_the_cluster(paths, "the cluster spark://m:7077", "prod")


def test_unknown_run_trigger_names_both_choices():
    assert run_trigger({"trigger": "available_now"}) == {"availableNow": True}
    assert run_trigger({"trigger": "processing_time"}) is None
    with pytest.raises(StreamingConfigError, match="--params trigger=available_now"):
        run_trigger({"trigger": "sometimes"})


def test_progress_log_counts_every_batch_and_keeps_totals_only(spark, tmp_path):
    """Every report is counted once, however many batches pass between updates,
    and a long run does not grow the driver: the state is totals, not history."""
    progress = ProgressLog()
    query_sink = SparkStreamingDataset(
        filepath=str(tmp_path / "out"),
        file_format="parquet",
        save_args={
            "checkpoint": str(tmp_path / "checkpoint"),
            "query_name": "ticks",
            "trigger": {"processingTime": "100 milliseconds"},
        },
    )
    query_sink.save(
        SparkStreamingDataset(
            file_format="rate", load_args={"rowsPerSecond": 50}
        ).load()
    )
    query = query_sink.query
    held = {}
    try:
        for batches in (2, 6):
            # Several batches between updates: none may be missed or counted twice.
            while (query.lastProgress or {"batchId": -1})["batchId"] < batches:
                assert query.exception() is None
                query.awaitTermination(0.5)
            progress.update("ticks", query)
            held[batches] = [
                (name, sorted(counts)) for name, counts in progress.totals.items()
            ]
    finally:
        query.stop()
    progress.update("ticks", query)
    progress.update("ticks", query)

    reports = query.recentProgress
    assert len(reports) < 100  # all of them still held by Spark, to compare with
    totals = progress.totals["ticks"]
    assert totals["batches"] == len(reports)
    assert totals["input_rows"] == sum(report.numInputRows for report in reports) > 0
    assert totals["rows_written"] == totals["input_rows"]
    # The same keys after 2 and 6 batches: one counter per figure, nothing per batch.
    assert held[2] == held[6] == [("ticks", sorted(totals))]


def test_the_late_figure_counts_late_groups_in_the_log_and_the_metrics(
    spark, tmp_path, caplog
):
    """Spark sums a micro-batch per window and key before its state, so its
    figure of late rows counts late (window, key) groups: the progress line
    names it for that. The Prometheus endpoint serves the log's figures."""
    batches = [
        ["2024-03-01 10:05:00 A"],
        ["2024-03-01 12:10:00 A"],  # the watermark passes 10:00, then 12:00
        # 5 late records in 3 late groups: (09:00, A) thrice, (09:00, B), (08:00, A).
        [
            "2024-03-01 09:10:00 A",
            "2024-03-01 09:20:00 A",
            "2024-03-01 09:30:00 A",
            "2024-03-01 09:40:00 B",
            "2024-03-01 08:50:00 A",
        ],
    ]
    landing = tmp_path / "landing"
    landing.mkdir()
    for number, lines in enumerate(batches):
        file = landing / f"{number}.csv"
        file.write_text("\n".join(lines) + "\n")
        os.utime(file, (1_700_000_000 + number, 1_700_000_000 + number))
    events = (
        spark.readStream.schema("line STRING")
        .option("maxFilesPerTrigger", 1)
        .csv(str(landing))
        .select(
            F.to_timestamp(F.substring("line", 1, 19)).alias("at"),
            F.substring("line", 21, 1).alias("key"),
        )
    )
    query = (
        events.withWatermark("at", "0 seconds")
        .groupBy(F.window("at", "1 hour"), "key")
        .count()
        .writeStream.format("noop")
        .outputMode("append")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    metrics = StreamMetrics()
    metrics.serve("127.0.0.1", 0)  # any free port
    progress = ProgressLog(StreamState(str(tmp_path / "streams")), metrics)
    metrics.started("late", query, {"processingTime": "1 minute 30 seconds"})
    try:
        with caplog.at_level(logging.INFO):
            progress.update("late", query)
        scrape = urlopen(f"http://127.0.0.1:{metrics.port}/metrics").read().decode()
    finally:
        metrics.close()

    assert progress.totals["late"]["late_state_rows_dropped"] == 3
    assert progress.stateful == {"late"}
    assert "3 late state rows dropped" in caplog.text
    series = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(scrape)
        for sample in family.samples
    }
    ran = [report for report in query.recentProgress if "addBatch" in report.durationMs]
    late = (("query", "late"),)
    assert {
        name: series[(f"kedro_stream_{name}", late)]
        for name in (
            "batches_total",
            "input_rows_total",
            "written_rows_total",
            "late_state_rows_dropped_total",
            "state_rows",
            "watermark_timestamp_seconds",
            "batch_duration_seconds_count",
            "trigger_interval_seconds",
            "trigger_active",
            "new_data_available",
        )
    } == {
        "batches_total": len(ran),
        "input_rows_total": 7,
        "written_rows_total": 0,  # no dataset observed it: a plain noop sink
        "late_state_rows_dropped_total": 3,
        "state_rows": 1,  # the 12:00 window of A
        "watermark_timestamp_seconds": datetime(
            2024, 3, 1, 12, 10, tzinfo=timezone.utc
        ).timestamp(),
        "batch_duration_seconds_count": len(ran),
        "trigger_interval_seconds": 90,
        # Spark's status of a query that has finished: no trigger, no input left.
        "trigger_active": 0,
        "new_data_available": 0,
    }
    # Summed batch by batch, in Spark's order, as the histogram sums them.
    assert series[("kedro_stream_batch_duration_seconds_sum", late)] == sum(
        report.batchDuration / 1000 for report in ran
    )
    # The last batch's start plus its duration: when it ended.
    started = datetime.fromisoformat(ran[-1].timestamp.replace("Z", "+00:00"))
    assert series[("kedro_stream_last_batch_timestamp_seconds", late)] == (
        started.timestamp() + ran[-1].batchDuration / 1000
    )


def test_packages_resolved_at_one_start_are_jars_at_the_next(tmp_path, monkeypatch):
    """The same packages skip Ivy while every jar they resolved to is there;
    other packages, a version that moves or a deleted jar resolve again."""
    monkeypatch.setattr(packages, "RESOLVED_PACKAGES", tmp_path / "resolved")
    jars = [tmp_path / "connector.jar", tmp_path / "clients.jar"]
    for jar in jars:
        jar.write_bytes(b"")
    conf = {"spark.master": "local[2]", "spark.jars.packages": "org.example:a:1.0"}
    assert without_resolution(conf) is conf  # nothing resolved yet

    remember_resolution(conf, ",".join(jar.as_uri() for jar in jars))
    assert without_resolution(conf) == {
        "spark.master": "local[2]",
        "spark.jars": f"{jars[0].as_uri()},{jars[1].as_uri()}",
    }
    other = {**conf, "spark.jars.packages": "org.example:a:1.1"}
    assert without_resolution(other) is other
    moving = {**conf, "spark.jars.packages": "org.example:a:1.1-SNAPSHOT"}
    remember_resolution(moving, jars[0].as_uri())
    assert without_resolution(moving) is moving
    jars[1].unlink()
    assert without_resolution(conf) is conf

    # Where nothing can be written, every start resolves, and none fails.
    (tmp_path / "a-file").write_bytes(b"")
    monkeypatch.setattr(packages, "RESOLVED_PACKAGES", tmp_path / "a-file/resolved")
    remember_resolution(conf, jars[0].as_uri())
    assert without_resolution(conf) is conf


# A session of the project's runtime in a process of its own, its JVM's
# options the first argument. It runs no job: the fewer classes, the sooner
# the JVM has written its archive.
ONE_SESSION = """
import sys
import pyspark
from kedro_streaming._run.session import configure_spark, spark_session
configure_spark({
    "spark.master": "local[1]",
    "spark.ui.enabled": "false",
    "spark.driver.extraJavaOptions": sys.argv[1],
})
assert spark_session().version == pyspark.__version__
"""


def test_spark_classes_archived_at_one_start_are_mapped_by_the_next(tmp_path):
    """The first start records Spark's classes, the next maps them; an archive
    the JVM cannot map is deleted and the session starts without it."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    archives = tmp_path / "cache" / "spark-class-archives"

    def start(java_options: str = "") -> None:
        subprocess.run(
            [sys.executable, "-c", ONE_SESSION, java_options],
            cwd=tmp_path,  # where a crashed JVM leaves its report
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )

    start()
    # Whole, and what it was recorded for: nothing partial or claimed is left.
    archive, record = sorted(archives.iterdir(), key=lambda path: path.suffix)
    assert (archive.suffix, record.name) == (".jsa", f"{archive.stem}.json")
    assert json.loads(record.read_text())["spark_home"] == str(
        Path(pyspark.__file__).parent
    )

    classes = tmp_path / "classes.log"
    start(f"-Xlog:class+load=info:file={classes}")
    assert "org.apache.spark.SparkContext source: shared objects file (top)" in (
        classes.read_text()
    )

    archive.write_bytes(archive.read_bytes()[: 2**20])  # a copy cut short
    start()  # starts all the same
    assert not archive.exists()


def test_one_process_at_a_time_records_the_class_archive(tmp_path, monkeypatch):
    """While a running process records the archive, others start without;
    the claim of a process that ended without archiving is taken over."""
    monkeypatch.setattr(jvm, "CLASS_ARCHIVES", tmp_path)
    archive = class_archive({})
    assert archive.parent == tmp_path
    assert class_archive({"spark.driver.extraJavaOptions": "-Xshare:off"}) is None

    recording = _claim_recording(archive)
    assert recording == archive.with_suffix(f".{os.getpid()}.partial")
    assert _claim_recording(archive) is None  # this process is running

    ended_pid = int(
        subprocess.check_output([sys.executable, "-c", "import os; print(os.getpid())"])
    )
    archive.with_suffix(".recording").write_text(str(ended_pid))
    left_behind = archive.with_suffix(f".{ended_pid}.partial")
    left_behind.write_bytes(b"cut short")
    assert _claim_recording(archive) == recording
    assert not left_behind.exists()

    archive.with_suffix(".failed").touch()  # a JVM that wrote no archive
    assert class_archive({}) is None

    # The archives of installations that are gone are deleted, others kept.
    gone = tmp_path / "0123.jsa"
    gone.write_bytes(b"classes")
    gone.with_suffix(".json").write_text(json.dumps({"spark_home": "/removed"}))
    _record_installation(archive)
    _prune_class_archives()
    assert {path.name for path in tmp_path.iterdir()} == {
        archive.with_suffix(suffix).name
        for suffix in (".failed", ".json", ".recording")
    }


def test_real_time_mode_needs_a_core_per_kafka_partition(spark):
    """A partition beyond a local Spark's cores would never be read, silently:
    refused before start (here local[2])."""
    out = SparkStreamingDataset(
        file_format="kafka",
        save_args={"checkpoint": "c", "trigger": {"realTime": "1 minute"}},
    )

    def source(**load_args):
        return SparkStreamingDataset(file_format="kafka", load_args=load_args)

    def check(dataset):
        check_real_time_task_slots(spark, {"out": out}, lambda _: {"in": dataset})

    check(source(assign='{"trips": [0, 1]}'))
    check(source(subscribePattern="trips.*"))  # partitions unknown before start
    for too_many in (
        source(assign='{"trips": [0, 1], "other": [0]}'),
        source(assign='{"trips": [0]}', minPartitions="3"),
    ):
        with pytest.raises(StreamingConfigError, match=r"source 'in' \(3\)") as error:
            check(too_many)
        assert "Spark has 2 cores: 1 partition(s) would never be read" in str(
            error.value
        )


def test_real_time_mode_is_refused_where_it_cannot_run(spark):
    """Spark 4.0 has no Real-Time Mode, a bounded run cannot end one, and it
    reads Kafka only, each record as it comes."""
    out = SparkStreamingDataset(
        file_format="kafka",
        save_args={"checkpoint": "c", "trigger": {"realTime": "1 minute"}},
    )
    assert out.real_time
    files = SparkStreamingDataset(filepath="in", file_format="json")
    limited = SparkStreamingDataset(
        file_format="kafka", load_args={"maxOffsetsPerTrigger": 100}
    )
    kafka_source = SparkStreamingDataset(file_format="kafka", load_args={})

    def refusal(version, sources, bounded=False):
        with pytest.raises(StreamingConfigError) as error:
            check_real_time(version, {"out": out}, lambda _: sources, bounded=bounded)
        return str(error.value)

    assert "Spark 4.0.2 does not have: it came with Spark 4.1" in refusal(
        "4.0.2", {"in": kafka_source}
    )
    assert "without `--params trigger=available_now`" in refusal(
        "4.2.0", {"in": kafka_source}, bounded=True
    )
    assert "reads Kafka only, but its query reads 'in' (json)" in refusal(
        "4.1.1", {"in": files}
    )
    assert "its source 'in' sets maxOffsetsPerTrigger, which" in refusal(
        "4.3.0", {"in": limited}
    )
    delayed = SparkStreamingDataset(
        file_format="kafka",
        load_args={"minOffsetsPerTrigger": 10, "maxTriggerDelay": "5m"},
    )
    assert "sets minOffsetsPerTrigger and maxTriggerDelay, which Spark" in refusal(
        "4.2.0", {"in": delayed}
    )
    # Spark's least interval (5 s by default), checked before the query
    # starts; Spark would fail the started query.
    hasty = SparkStreamingDataset(
        file_format="kafka",
        save_args={"checkpoint": "c", "trigger": {"realTime": "2 seconds"}},
    )
    with pytest.raises(StreamingConfigError) as error:
        check_real_time_intervals(spark, {"hasty": hasty, "out": out})
    assert str(error.value) == (
        "Real-Time Mode cannot run here:\n  - 'hasty' would checkpoint every 2 "
        "seconds, more often than Spark allows in Real-Time Mode "
        "(spark.sql.streaming.realTimeMode.minBatchDuration: 5 s): give its "
        "realTime trigger in the catalog 5 seconds or more"
    )
    for version in ("4.1.1", "4.2.0", "4.3.0"):
        check_real_time(
            version, {"out": out}, lambda _: {"in": kafka_source}, bounded=False
        )

    # Stateful operators: none before Spark 4.3, aggregations and
    # dropDuplicates from 4.3 on. A join with a static table keeps no state.
    stream = spark.readStream.format("rate").load()
    static = spark.range(3).withColumnRenamed("id", "value")
    stateless = stream.join(static, "value", "left").select("value", "timestamp")
    windows = (
        stream.withWatermark("timestamp", "1 minute")
        .groupBy(F.window("timestamp", "1 minute"))
        .count()
    )
    deduplicated = stream.dropDuplicates(["value"])
    for version in ("4.1.1", "4.2.0", "4.3.0"):
        assert real_time_plan_problem(stateless, version) is None
    for frame, operator in ((windows, "Aggregate"), (deduplicated, "Deduplicate")):
        problem = real_time_plan_problem(frame, "4.2.0")
        assert (
            f"Spark 4.2.0 does not run the stateful operation(s) {operator}" in problem
        )
        assert real_time_plan_problem(frame, "4.3.0") is None


def test_a_kafka_sink_needs_a_topic_option_or_column(spark):
    sink_without_topic = SparkStreamingDataset(
        file_format="kafka", save_args={"checkpoint": "c"}
    )
    rows = spark.createDataFrame([("k", "v")], "key STRING, value STRING")
    assert sink_without_topic.data_problems(rows) == [
        "writes to Kafka without a topic: add `save_args: {topic: ...}`, or give "
        "each row its topic in a `topic` column"
    ]
    assert sink_without_topic.data_problems(rows.withColumn("topic", F.lit("t"))) == []
    # A struct value with a topic column: one record per topic, each a struct.
    routed = spark.sql(
        "SELECT 't' AS topic, named_struct('t', named_struct('n', 1), 'n', 2) AS value"
    )
    assert sink_without_topic.data_problems(routed) == [
        "names each row's topic in a `topic` column, so its `value` must hold one "
        "record (a struct) per topic, named after it; n is not a struct"
    ]
