"""A run's life through the hooks: checks before any query starts, the run
starting what was checked, progress and figures, the console."""

import logging
import os
import re
import socket
import sys
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from urllib.request import urlopen

import pytest
from kedro.io import DataCatalog
from kedro.pipeline import node, pipeline
from kedro.runner import SequentialRunner
from kedro_streaming import (
    Lookup,
    SparkStreamingDataset,
    StreamingConfigError,
    StreamingQueryHooks,
)
from kedro_streaming._checks.catalog import (
    check_paths_reach_the_cluster,
    check_paths_resolve_in_the_project,
)
from kedro_streaming._checks.checks import check_before_spark
from kedro_streaming._checks.spec import RunSpec, run_trigger
from kedro_streaming._nodes import lookup as lookup_module
from kedro_streaming._observe.metrics import StreamMetrics
from kedro_streaming._observe.progress import ProgressLog
from kedro_streaming._observe.state import StreamState
from kedro_streaming._run.console import run_console
from kedro_streaming.devtools.processes import DEFAULT_PORTS, port_is_free
from prometheus_client.parser import text_string_to_metric_families
from pyspark.sql import functions as F
from rich.logging import RichHandler

from tests.helpers import (
    DATASET,
    SOURCE,
    kafka,
    registered,
    sink,
    sink_in,
    streaming_hooks,
)

# One bad configuration each: the catalog, then what the message must say.
BAD_CONFIGURATIONS = {
    "sink without checkpoint": (
        {"out": {"type": DATASET, "filepath": "out", "file_format": "parquet"}},
        "'out' has no checkpoint: add a folder of its own to its save_args, beside "
        "the other sinks' checkpoints (a new project's catalog has `checkpoint: "
        "${globals:output_root}/checkpoints/<the sink's name>`)",
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
        # `validate`, a dry run made while the stream runs, says it as a note.
        run = RunSpec.read(catalog, nodes, {"metrics_port": port})
        assert check_before_spark(run, dry_run=True) == [
            f"Cannot serve the Prometheus metrics at 127.0.0.1:{port} (Address "
            "already in use): run with `--params metrics_port=<a free port>` "
            "(another run may have this one), or `--params metrics_port=0` for no "
            "endpoint."
        ]
        with pytest.raises(StreamingConfigError, match="Address already in use"):
            check_before_spark(run)
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


def test_a_misspelt_sink_entry_fails_before_any_query_starts():
    """An intermediate output whose entry is misspelt: Kedro would keep it in
    memory and run the query downstream of it as if nothing were wrong."""
    catalog = DataCatalog.from_config(
        {"in": SOURCE, "checked_record": sink("checked"), "rejected": sink("rejected")}
    )
    nodes = pipeline(
        [
            node(lambda df: df, "in", "checked_records"),
            node(lambda df: df, "checked_records", "rejected"),
        ]
    )
    with pytest.raises(StreamingConfigError) as error:
        StreamingQueryHooks().before_pipeline_run({}, nodes, catalog)
    assert str(error.value) == (
        "A catalog entry's name is not the pipeline's:\n"
        "  - the pipeline uses 'checked_records', which the catalog does not "
        "declare, and the catalog declares 'checked_record', which no pipeline "
        "uses: rename the entry 'checked_record' to 'checked_records' (or the "
        "node's dataset to 'checked_record'); as it is, Kedro would keep "
        "'checked_records' in memory and never write it"
    )
    assert catalog["rejected"].query is None


def watermarked(frame, delay):
    return frame.withWatermark("at", delay)


def counted(frame):
    return frame.groupBy("id").count()


def windowed(frame, duration):
    return (
        frame.withWatermark("at", "1 minute").groupBy(F.window("at", duration)).count()
    )


def watermarked_twice(frame):
    return frame.withWatermark("at", "1 minute").withWatermark("at", "5 minutes")


# Spark's reason for `params:delay` ("10 minuets"), and the fix.
UNPARSABLE_DELAY = (
    "[CANNOT_PARSE_INTERVAL] Unable to parse '10 minuets'. Please ensure that the "
    "value provided is in a valid format for defining an interval. You can "
    "reference the documentation for the correct format. If the issue persists, "
    "please double check that the input value is not null or empty and try "
    "again. SQLSTATE: 22006 (the value of params:delay). Fix: give params:delay "
    "an interval Spark reads, e.g. '10 minutes', '30 seconds' or '1 hour', in "
    "conf/<env>/parameters*.yml"
)
# A second node that cannot start its query, and the problem's line (Spark's
# reason after the node's name).
BROKEN_SECOND_NODES = {
    "invalid watermark delay from a parameter": (
        node(watermarked, ["in", "params:delay"], "second", name="b_watermark"),
        f"query second: node b_watermark fails: {UNPARSABLE_DELAY}",
    ),
    # PySpark logs this one itself too, with the DataFrame's call site.
    "invalid window duration from a parameter": (
        node(windowed, ["in", "params:delay"], "second", name="b_window"),
        f"query second: node b_window fails: {UNPARSABLE_DELAY}",
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
    "a watermark set twice on one stream": (
        node(watermarked_twice, "in", "second", name="b_twice"),
        "query second (node b_twice): sets a watermark on `at` over a stream that "
        "already has one (on `at`): Spark refuses to redefine a watermark, at the "
        "query's first batch. Keep one withWatermark per stream, where the node "
        "reads it; over a table that a stream with a watermark wrote, the mark is "
        "its writer's: read the table without it (no `keep_watermark: true` in the "
        "source's load_args) and set this query's own (docs/stateful.md)",
    ),
}


@pytest.mark.parametrize("case", BROKEN_SECOND_NODES)
def test_a_node_mistake_fails_the_run_before_any_query_starts(spark, case, capfd):
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
            **{name: sink_in(here, name) for name in ("first", "second")},
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
    # Said once: not again by PySpark's own logger, with the JVM's stack.
    assert "DataFrameQueryContextLogger" not in capfd.readouterr().err


def test_each_node_runs_once_and_the_run_starts_what_was_checked(spark, caplog):
    """The dry run's DataFrames are the run's: a node runs once, unless it
    reads a sink of the same run, which the dry run read as a stand-in (the
    run reads it once written; its lookups keep the rows they read). The
    nodes' functions are theirs again after."""
    here = Path.cwd()
    (here / "in" / "0.json").write_text('{"id": 1}\n{"id": 2}\n')
    catalog = DataCatalog.from_config(
        {
            "in": {**SOURCE, "filepath": str(here / "in")},
            **{name: sink_in(here, name) for name in ("first", "second")},
        },
    )
    calls = Counter()

    def counting(step):
        def function(frame):
            calls[step] += 1
            return frame.withColumn(step, F.lit(calls[step]))

        function.__name__ = step
        return function

    names = here / "names.csv"
    names.write_text("id,name\n1,one\n2,two\n")

    def named(frame):
        table = spark.read.csv(str(names), header=True, schema="id INT, name STRING")
        found = Lookup(table, key="id").value("name", F.col("id"))
        return counting("copied")(frame).withColumn("name", found)

    nodes = pipeline(
        [
            node(counting("typed"), "in", "typed", name="typed"),
            node(counting("checked"), "typed", "first", name="checked"),
            node(named, "first", "second", name="copied"),
        ]
    )
    functions = [each.func for each in nodes.nodes]
    hooks = streaming_hooks(metrics_port=0, trigger="available_now")
    hook_manager = registered(hooks)
    hooks.before_pipeline_run({}, nodes, catalog)
    # Read by the dry run: the run builds `copied` again, on the same rows.
    names.write_text("id,name\n1,uno\n2,dos\n")
    SequentialRunner().run(nodes, catalog, hook_manager)
    with caplog.at_level(logging.INFO, logger="kedro_streaming.queries"):
        hooks.after_pipeline_run({})

    assert calls == {"typed": 1, "checked": 1, "copied": 2}
    # Bounded queries end by themselves: no Ctrl-C to ask for.
    assert "Waiting for first, second to read what is there." in caplog.text
    assert "Ctrl-C" not in caplog.text
    assert [each.func for each in nodes.nodes] == functions
    # What was checked is what ran: the dry run's columns (call 1), and
    # `copied` as the run built it, on what `first` holds (call 2).
    # The lookup's table was read once in the run, when the checks built it.
    rows = sorted(
        tuple(row) for row in spark.read.parquet(str(here / "second")).collect()
    )
    assert rows == [(1, 1, 1, 2, "one"), (2, 1, 1, 2, "two")]
    assert lookup_module._run_reads.tables is None  # and is read anew outside a run


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


@pytest.mark.parametrize(
    ("folder", "checkpoint", "refused"),
    [
        pytest.param(".", "data/checkpoints/out", False, id="in the project"),
        pytest.param("src", "data/checkpoints/out", True, id="in src, relative"),
        pytest.param("src", "{project}/checkpoints/out", False, id="in src, absolute"),
        pytest.param("src", "s3a://bucket/checkpoints/out", False, id="in src, s3a"),
    ],
)
def test_relative_checkpoints_are_refused_outside_the_project_folder(
    tmp_path, monkeypatch, folder, checkpoint, refused
):
    """Kedro runs from any folder inside a project; a relative checkpoint
    would then be that folder's: a new one, every source read again."""
    (tmp_path / "src").mkdir()
    monkeypatch.chdir(tmp_path / folder)
    paths = {
        "out": [checkpoint.format(project=tmp_path)],
        "state_dir (streaming.yml)": [str(tmp_path / "streams")],
    }
    if not refused:
        check_paths_resolve_in_the_project(paths, tmp_path)
        return
    with pytest.raises(StreamingConfigError) as error:
        check_paths_resolve_in_the_project(paths, tmp_path)
    assert str(error.value) == (
        f"This command runs in {tmp_path / 'src'}, not in the project's folder "
        f"{tmp_path}, so these relative paths would be resolved here: new "
        "checkpoints, every source read again from the start:\n"
        "  - 'out': 'data/checkpoints/out'\n"
        f"Run it from {tmp_path}, or make the paths absolute (input_root and "
        "output_root in conf/<env>/globals.yml)."
    )
    check_paths_resolve_in_the_project(paths, None)  # no project: not checked


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
            "seconds_without_progress",
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
        # Idle at the scrape: it wants nothing.
        "seconds_without_progress": 0,
    }
    # Per stateful operator: its rows and its store's memory after the last batch.
    operator = (("operator", "stateStoreSave"), ("query", "late"))
    last_state = ran[-1].stateOperators[0]
    assert (
        series[("kedro_stream_state_operator_rows", operator)],
        series[("kedro_stream_state_operator_memory_bytes", operator)],
    ) == (1, last_state.memoryUsedBytes)
    assert "1 state rows (stateStoreSave 1 rows " in caplog.text
    # Summed batch by batch, in Spark's order, as the histogram sums them.
    assert series[("kedro_stream_batch_duration_seconds_sum", late)] == sum(
        report.batchDuration / 1000 for report in ran
    )
    # The last batch's start plus its duration: when it ended.
    started = datetime.fromisoformat(ran[-1].timestamp.replace("Z", "+00:00"))
    assert series[("kedro_stream_last_batch_timestamp_seconds", late)] == (
        started.timestamp() + ran[-1].batchDuration / 1000
    )
