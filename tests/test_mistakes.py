"""The mistakes people make when they edit a generated project for their own
stream, each made in the walkthrough's project (its Kafka source, its
alerts pipeline) and refused before any query starts: the exact message,
no stack trace, and nothing written (no checkpoint, no table, no message).

Each case is one `kedro run` (or `kedro streams broker start`) as a user
types it, so the message is the one the user reads; those refused before
Spark starts show that too. One case is not refused, as the run can work:
the Spark UI's port taken, where the run goes on and says where its UI is.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import socket
from pathlib import Path

import pytest
from kafka import KafkaConsumer, TopicPartition
from support.common import SASL_PASSWORD, SASL_USER, SPARK_VERSION, free_port, run
from support.kafka import send_to_one_partition
from support.project import venv_like, walkthrough_project

READINGS = "mistakes-readings"
ALERTS = "mistakes-alerts"
MESSAGES = [
    json.dumps(
        {"device": "boiler-1", "at": f"2026-11-26T10:0{i}:05Z", "temperature_c": 55.0}
    )
    for i in range(7)
]
SPARK_STARTED = f"Spark {SPARK_VERSION} on"
KAFKA_ENV = ["--env", "kafka", "--pipelines", "records"]
BOTH = ["--env", "kafka", "--pipelines", "records,alerts"]


@pytest.fixture(scope="module")
def project(sensor_project, broker, tmp_path_factory) -> Path:
    """The walkthrough's project on its own topics, 7 readings waiting."""
    project = walkthrough_project(
        sensor_project, tmp_path_factory.mktemp("mistakes"), broker.bootstrap_servers
    )
    edit(project / "conf/kafka/globals.yml", ("sensor-readings", READINGS))
    edit(project / "conf/kafka/globals.yml", ("device-alerts", ALERTS))
    send_to_one_partition(
        broker.bootstrap_servers, READINGS, [m.encode() for m in MESSAGES]
    )
    return project


def edit(path: Path, *replacements: tuple[str, str]) -> None:
    text = path.read_text()
    for old, new in replacements:
        assert old in text, f"{old!r} is not in {path}"
        text = text.replace(old, new, 1)
    path.write_text(text)


@contextlib.contextmanager
def mistake(project: Path, edits: dict[str, list[tuple[str, str]]]):
    """The files as the user edits them, restored afterwards."""
    before = {name: (project / name).read_text() for name in edits}
    try:
        for name, replacements in edits.items():
            edit(project / name, *replacements)
        yield
    finally:
        for name, text in before.items():
            (project / name).write_text(text)


def topic_ends(servers: str) -> dict[str, int]:
    """Messages per topic of this module (a topic absent: not there)."""
    consumer = KafkaConsumer(bootstrap_servers=servers)
    try:
        ends = {}
        for topic in (READINGS, ALERTS):
            partitions = consumer.partitions_for_topic(topic)
            if partitions:
                tps = [TopicPartition(topic, p) for p in partitions]
                ends[topic] = sum(consumer.end_offsets(tps).values())
        return ends
    finally:
        consumer.close()


CATALOG = "conf/kafka/catalog.yml"
BASE_CATALOG = "conf/base/catalog.yml"
ALERT_NODES = "src/sensor_lab/pipelines/alerts/nodes.py"
ALERT_PARAMETERS = "conf/base/parameters_alerts.yml"
# A sink's trigger that Spark cannot read (made in the validate test).
WRONG_TRIGGER = (
    "checkpoint: ${globals:output_root}/checkpoints/checked_records",
    "checkpoint: ${globals:output_root}/checkpoints/checked_records\n"
    "    trigger: {processingTime: ten seconds}",
)
# How a run refuses the queries its nodes cannot build, before the first starts.
NODES_FAIL = (
    "StreamingConfigError: Streaming queries cannot start as the pipeline's "
    "nodes build them (`kedro streams validate` lists the same):"
)
# (case, files edited, `kedro run` arguments, the message, whether Spark started)
CASES = [
    (
        "misspelt and wrong Kafka options",
        {
            CATALOG: [
                ("startingOffsets: earliest", "startingOffset: earliest"),
                (
                    "failOnDataLoss: true",
                    "failOnDataLoss: ture\n    maxOffsetsPerTrigger: 0\n"
                    "    kafka.request.timeout.msec: 5000",
                ),
            ]
        },
        KAFKA_ENV,
        "StreamingConfigError: Options in conf/ that Spark would ignore or refuse:\n"
        "  - 'raw_records' `startingOffset` in its load_args is not a Kafka source "
        f"option of Spark {SPARK_VERSION}: did you mean `startingOffsets`?\n"
        "  - 'raw_records' `failOnDataLoss: ture` in its load_args: use true or false\n"
        "  - 'raw_records' `maxOffsetsPerTrigger: 0` in its load_args: use a whole "
        "number above 0\n"
        "  - 'raw_records' `kafka.request.timeout.msec` in its load_args is not a "
        "Kafka client setting: did you mean `kafka.request.timeout.ms`?",
        True,
    ),
    (
        "a topic that does not exist",
        {
            CATALOG: [
                (
                    "subscribe: ${globals:kafka.readings_topic}",
                    "subscribe: mistakes-reading",
                )
            ]
        },
        KAFKA_ENV,
        "StreamingConfigError: Kafka topics in conf/ cannot be read as configured:\n"
        "  - 'raw_records' reads the topic 'mistakes-reading', which the brokers at "
        "{servers} do not have (closest: 'mistakes-readings'). Fix the topic's name, "
        "or create the topic; to have the brokers create it when the query "
        "subscribes, set `kafka.allow.auto.create.topics: true` in its load_args",
        True,
    ),
    (
        "a new checkpoint without startingOffsets",
        {CATALOG: [("    startingOffsets: earliest\n", "")]},
        KAFKA_ENV,
        "StreamingConfigError: Kafka topics in conf/ cannot be read as configured:\n"
        "  - 'raw_records' would skip the 7 messages already in 'mistakes-readings': "
        "the new checkpoint of checked_records would start at the topic's end "
        "(Spark's default). Say which you mean in its load_args: `startingOffsets: "
        "earliest` to read them, or `startingOffsets: latest` to skip them knowingly",
        True,
    ),
    (
        "forgetting --env kafka",
        {},
        ["--pipelines", "alerts"],
        "StreamingConfigError: No sink for 'device_alerts': this environment's "
        "catalog does not declare it, so the stream would stay in memory and never "
        "run. Declare a streaming sink in conf/<env>/catalog.yml, or run with the "
        "environment that declares one (`kedro run --env kafka`).",
        False,
    ),
    (
        "a source declared in another environment only",
        {
            CATALOG: [("raw_records:", "sensor_readings:")],
            "src/sensor_lab/pipelines/records/pipeline.py": [
                ('"raw_records"', '"sensor_readings"')
            ],
        },
        ["--pipelines", "records"],
        "StreamingConfigError: The pipeline reads what this environment does not "
        "declare:\n"
        "  - 'sensor_readings': declared in conf/kafka/catalog.yml: run with "
        "`--env kafka`",
        False,
    ),
    (
        "a file source path that does not exist",
        {BASE_CATALOG: [("/records_landing", "/record_landing")]},
        ["--pipelines", "records"],
        "StreamingConfigError: Streaming configuration in conf/ cannot work:\n"
        "  - 'raw_records' reads '{project}/data/01_raw/record_landing', which does "
        "not exist (beside it: '{project}/data/01_raw/records_landing'): fix its "
        "filepath; or create the folder, if files are to land there (git keeps no "
        "empty folder: a .gitkeep file in it keeps it in a clone); or, if another "
        "pipeline's sink writes it, run that pipeline first (`kedro run "
        "--pipelines <name>`)",
        False,
    ),
    (
        "a sink inside its own source",
        {
            BASE_CATALOG: [
                (
                    "${globals:output_root}/02_intermediate/checked_records",
                    "${globals:input_root}/records_landing/checked",
                )
            ]
        },
        ["--pipelines", "records"],
        "StreamingConfigError: Streaming configuration in conf/ cannot work:\n"
        "  - 'checked_records' writes to '{project}/data/01_raw/records_landing/"
        "checked', inside or around the folder '{project}/data/01_raw/"
        "records_landing' that "
        "'raw_records' reads: the stream would read its own output. Give the sink "
        "a folder of its own, outside the source's",
        False,
    ),
    (
        "a checkpoint shared by two queries",
        # The same folder, spelt another way.
        {CATALOG: [("checkpoints/device_alerts", "checkpoints/checked_records/")]},
        BOTH,
        "StreamingConfigError: Streaming configuration in conf/ cannot work:\n"
        "  - checked_records, device_alerts share the checkpoint "
        "'data/kafka/checkpoints/checked_records': give each sink its own",
        False,
    ),
    (
        "a wrong type in the schema",
        {
            "conf/base/parameters.yml": [
                ("temperature_c DOUBLE", "temperature_c DOUBEL")
            ]
        },
        ["--pipelines", "records"],
        # parse_records names the schema and where to fix it, then Spark's
        # reason; refused by the dry run of every query before the first starts.
        f"{NODES_FAIL}\n  - query checked_records, quarantined_records: node parse_records fails: The "
        "record schema 'device STRING NOT NULL, at TIMESTAMP, temperature_c "
        "DOUBEL' is not Spark SQL DDL: …",
        True,
    ),
    (
        "a misspelt column in an expectation",
        {
            "conf/base/parameters_expectations.yml": [
                ("expect: temperature_c BETWEEN", "expect: temprature_c BETWEEN")
            ]
        },
        ["--pipelines", "records"],
        # Spark's own reason follows, with its suggestion of temperature_c.
        f"{NODES_FAIL}\n  - query checked_records, quarantined_records: node check_records fails: "
        "expectation 'temperature_plausible' "
        "(record_expectations, conf/base/parameters_expectations.yml): "
        "`temprature_c BETWEEN -50 AND 60` cannot be checked: "
        "[UNRESOLVED_COLUMN.WITH_SUGGESTION] …",
        True,
    ),
    (
        "a Kafka connector of another Spark in spark.yml",
        {"conf/base/spark.yml": [(f"0-10_2.13:{SPARK_VERSION}", "0-10_2.13:3.5.1")]},
        ["--pipelines", "records"],
        "StreamingConfigError: spark.yml asks for the Kafka connector "
        "org.apache.spark:spark-sql-kafka-0-10_2.13:3.5.1, but the running Spark is "
        f"{SPARK_VERSION} built for Scala 2.13. Fix: in spark.jars.packages of "
        "conf/base/spark.yml, use org.apache.spark:spark-sql-kafka-0-10_2.13:"
        f"{SPARK_VERSION}, or install the pyspark the package was built for.",
        False,
    ),
    (
        "Spark 4.0's name of a class, on Spark 4.1 or later",
        {
            "conf/base/spark.yml": [
                ("streaming.checkpointing.FileSystemBased", "streaming.FileSystemBased")
            ]
        },
        ["--pipelines", "records"],
        f"StreamingConfigError: spark.yml names classes that Spark {SPARK_VERSION} "
        "does not have:\n"
        "  - spark.sql.streaming.checkpointFileManagerClass: "
        "org.apache.spark.sql.execution.streaming.FileSystemBasedCheckpointFileManager\n"
        "Fix: name the class as this Spark line has it (its checkpoint file managers "
        "are in org.apache.spark.sql.execution.streaming up to 4.0, in its "
        "checkpointing package from 4.1), or drop the line for Spark's default.",
        True,
    ),
    (
        "a misspelt setting in streaming.yml",
        {"conf/base/streaming.yml": [("\ntrigger_interval:", "\ntrigger_intervall:")]},
        ["--pipelines", "records"],
        "StreamingConfigError: streaming.yml sets what the runtime does not read:\n"
        "  - 'trigger_intervall': did you mean `trigger_interval`?\n"
        "Its settings: trigger, trigger_interval, metrics_address, metrics_port, "
        "metrics_tls_certfile, metrics_tls_keyfile, metrics_tls_client_cafile, "
        "metrics_serve_after_failure, kafka_connect_timeout, "
        "realtime_planner_warm_up, state_dir, "
        "progress_log_max_bytes, spark_ui_port, spark_ui_address, "
        "spark_ui_kill_enabled.",
        False,
    ),
    (
        "a value Spark refuses in spark.yml",
        {
            "conf/base/spark.yml": [
                ("spark.ui.enabled: true", "spark.ui.enabled: flase")
            ]
        },
        ["--pipelines", "records"],
        "StreamingConfigError: Spark did not start with the settings of spark.yml: …",
        False,
    ),
    (
        "a parameter the pipeline reads, misspelt",
        {"conf/base/parameters.yml": [("record_schema:", "records_schema:")]},
        ["--pipelines", "records"],
        "StreamingConfigError: The pipeline reads what this environment does not "
        "declare:\n"
        "  - 'params:record_schema': no parameter record_schema in "
        "conf/<env>/parameters*.yml: did you mean `params:records_schema`?",
        False,
    ),
    (
        "a key of the plugin's misspelt, which Spark would take for an option",
        {
            BASE_CATALOG: [
                (
                    "checkpoint: ${globals:output_root}/checkpoints/checked_records",
                    "checkpiont: ${globals:output_root}/checkpoints/checked_records",
                )
            ]
        },
        ["--pipelines", "records"],
        "StreamingConfigError: Streaming configuration in conf/ cannot work:\n"
        "  - 'checked_records' has `checkpiont` in its save_args: did you mean "
        "`checkpoint`?",
        False,
    ),
    (
        "a trigger setting misspelt in --params",
        {},
        ["--pipelines", "records", "--params", "trigger=availble_now"],
        "StreamingConfigError: Unknown trigger 'availble_now': run with `--params "
        "trigger=available_now` (process what is there, then stop) or `--params "
        "trigger=processing_time` (run until stopped).",
        False,
    ),
    (
        "--params names misspelt, which Kedro alone would ignore: a setting, "
        "and a key inside a parameter's mapping",
        {},
        [
            *("--pipelines", "records", "--params"),
            "triger=available_now,"
            "record_expectations.temperature_plausibel.action=warn",
        ],
        "StreamingConfigError: --params names what nothing in this project reads "
        "(no parameter of conf/<env>/parameters*.yml, no setting of streaming.yml, "
        "no ${{runtime_params:...}} in conf/), so the run would ignore it:\n"
        "  - 'triger': did you mean `trigger`?\n"
        "  - 'record_expectations.temperature_plausibel': did you mean "
        "`temperature_plausible`?\n"
        "Fix the name, or declare it in parameters.yml.",
        False,
    ),
    # Issue 67: one user's mistakes, each as they made it. In edits and
    # arguments, <servers> is the broker's address, <free port> a port where
    # nothing listens and <held port> one that the test holds listening (as
    # by another program); the messages take {servers}, {project}, {held}
    # and {free}.
    (
        "file_fromat: a catalog key misspelt",
        {BASE_CATALOG: [("  file_format: parquet", "  file_fromat: parquet")]},
        ["--pipelines", "records"],
        "StreamingConfigError: Streaming configuration in conf/ cannot work:\n"
        "  - 'checked_records' has `file_fromat`, which a SparkStreamingDataset "
        "entry does not take: did you mean `file_format`?",
        False,
    ),
    (
        "checked_record: a sink entry misspelt",
        {BASE_CATALOG: [("checked_records:\n  type", "checked_record:\n  type")]},
        ["--pipelines", "records"],
        # Before: the run went on, checked_records kept in memory, never written.
        "StreamingConfigError: A catalog entry's name is not the pipeline's:\n"
        "  - the pipeline uses 'checked_records', which the catalog does not "
        "declare, and the catalog declares 'checked_record', which no pipeline "
        "uses: rename the entry 'checked_record' to 'checked_records' (or the "
        "node's dataset to 'checked_record'); as it is, Kedro would keep "
        "'checked_records' in memory and never write it",
        False,
    ),
    (
        "checkpoint: removed from a sink",
        {
            BASE_CATALOG: [
                (
                    "    checkpoint: ${globals:output_root}/checkpoints/"
                    "checked_records\n",
                    "",
                )
            ]
        },
        ["--pipelines", "records"],
        "StreamingConfigError: Streaming configuration in conf/ cannot work:\n"
        "  - 'checked_records' has no checkpoint: add a folder of its own to its "
        "save_args, beside the other sinks' checkpoints (a new project's catalog "
        "has `checkpoint: ${{globals:output_root}}/checkpoints/<the sink's "
        "name>`), so that a restart resumes where it stopped",
        False,
    ),
    (
        "withWatermark removed before a windowed average",
        {
            ALERT_NODES: [
                ('        .withWatermark("at", alerts["watermark_delay"])\n', "")
            ]
        },
        BOTH,
        f"{NODES_FAIL}\n  - query device_alerts (node device_alerts): "
        "[STREAMING_OUTPUT_MODE.UNSUPPORTED_OPERATION] Invalid streaming output "
        "mode: append. This output mode is not supported for streaming "
        "aggregations without watermark on streaming DataFrames/DataSets. "
        "SQLSTATE: 42KDE Fix: in the node, `.withWatermark(<event-time column>, "
        "<delay>)` before the aggregation (append writes a window once the "
        "watermark passes it), or give the sink `output_mode: update` or "
        "`complete`",
        True,
    ),
    (
        "watermark_delay: 10 minuets",
        {
            ALERT_PARAMETERS: [
                ("watermark_delay: 30 seconds", "watermark_delay: 10 minuets")
            ]
        },
        BOTH,
        f"{NODES_FAIL}\n  - query device_alerts: node device_alerts fails: "
        "[CANNOT_PARSE_INTERVAL] Unable to parse '10 minuets'. …",
        True,
    ),
    (
        "max_avg_temperature_c: thirty",
        {
            ALERT_PARAMETERS: [
                ("max_avg_temperature_c: 50.0", "max_avg_temperature_c: thirty")
            ]
        },
        BOTH,
        # Before: checked_records wrote its batch, then device_alerts failed
        # at its first (Spark casts the constant when it optimizes the plan).
        f"{NODES_FAIL}\n  - query device_alerts (node device_alerts): "
        "[CAST_INVALID_INPUT] The value 'thirty' of the type \"STRING\" cannot "
        'be cast to "DOUBLE" because it is malformed. Correct the value as per '
        "the syntax, or change its target type. Use `try_cast` to tolerate "
        "malformed input and return NULL instead. SQLSTATE: 22018 (the value of "
        "params:alerts.max_avg_temperature_c). Fix: in conf/<env>/parameters*.yml, "
        "give params:alerts.max_avg_temperature_c a value of the type Spark "
        "casts it to",
        True,
    ),
    (
        "a join on devise",
        {
            ALERT_NODES: [
                (
                    'checked_records.filter(F.col("rejection_reason").isNull())',
                    'checked_records.filter(F.col("rejection_reason").isNull())\n'
                    "        .join(\n"
                    "            checked_records.sparkSession.createDataFrame(\n"
                    '                [("boiler-1", "kitchen")], "device STRING, '
                    'room STRING"\n'
                    "            ),\n"
                    '            "devise",\n'
                    "        )",
                )
            ]
        },
        BOTH,
        # Spark's reason lists the columns there are.
        f"{NODES_FAIL}\n  - query device_alerts: node device_alerts fails: "
        "[UNRESOLVED_USING_COLUMN_FOR_JOIN] USING column `devise` cannot be "
        "resolved on the left side of the join. The left-side columns: [`at`, "
        "`device`, …",
        True,
    ),
    (
        "output_mode: complete on a parquet sink",
        {BASE_CATALOG: [("output_mode: append", "output_mode: complete")]},
        ["--pipelines", "records"],
        "StreamingConfigError: Streaming configuration in conf/ cannot work:\n"
        "  - 'checked_records' has output_mode 'complete', which a parquet sink "
        "does not support (it only appends): use append, with a watermark before "
        "any aggregation, or a sink that can update (kafka, foreach_batch, or "
        "delta with merge_on)",
        False,
    ),
    (
        "expect: temperature_c >>= -50",
        {
            "conf/base/parameters_expectations.yml": [
                (
                    "expect: temperature_c BETWEEN -50 AND 60",
                    "expect: temperature_c >>= -50",
                )
            ]
        },
        ["--pipelines", "records"],
        f"{NODES_FAIL}\n  - query checked_records, quarantined_records: node "
        "check_records fails: expectation 'temperature_plausible' "
        "(record_expectations, conf/base/parameters_expectations.yml): "
        "`temperature_c >>= -50` cannot be checked: [PARSE_SYNTAX_ERROR] Syntax "
        "error at or near '='. SQLSTATE: 42601 (line 1, pos 16). Fix the "
        "expression; it can use the record's columns: …",
        True,
    ),
    (
        "action: quarantene",
        {
            "conf/base/parameters_expectations.yml": [
                ("action: quarantine", "action: quarantene")
            ]
        },
        ["--pipelines", "records"],
        f"{NODES_FAIL}\n  - query checked_records, quarantined_records: node "
        "check_records fails: expectation 'temperature_plausible' "
        "(record_expectations, conf/base/parameters_expectations.yml): action "
        "'quarantene' is not one of warn, quarantine, fail: did you mean "
        "`quarantine`? (the value of "
        "params:record_expectations.temperature_plausible.action)",
        True,
    ),
    (
        "--params trigger=availablenow",
        {},
        ["--pipelines", "records", "--params", "trigger=availablenow"],
        "StreamingConfigError: Unknown trigger 'availablenow': run with `--params "
        "trigger=available_now` (process what is there, then stop) or `--params "
        "trigger=processing_time` (run until stopped).",
        False,
    ),
    (
        "alerts run before records has written checked_records",
        {},
        ["--env", "kafka", "--pipelines", "alerts"],
        "StreamingConfigError: Streaming configuration in conf/ cannot work:\n"
        "  - 'checked_records' reads '{project}/data/kafka/02_intermediate/"
        "checked_records', which does not exist: fix its filepath; or create the "
        "folder, if files are to land there (git keeps no empty folder: a .gitkeep "
        "file in it keeps it in a clone); or, if another pipeline's sink writes "
        "it, run that pipeline first (the records "
        "pipeline writes it: `kedro run --pipelines records`, with this run's "
        "--env)",
        False,
    ),
    (
        "metrics_port taken by another program",
        {},
        ["--pipelines", "records", "--params", "metrics_port=<held port>"],
        "StreamingConfigError: Cannot serve the Prometheus metrics at "
        "127.0.0.1:{held} (Address already in use): run with `--params "
        "metrics_port=<a free port>` (another run may have this one), or "
        "`--params metrics_port=0` for no endpoint.",
        False,
    ),
    (
        "kafka.bootstrap_servers: a port where nothing listens",
        {"conf/kafka/globals.yml": [("<servers>", "127.0.0.1:<free port>")]},
        KAFKA_ENV,
        "StreamingConfigError: 'raw_records': the Kafka broker at 127.0.0.1:{free} "
        "refuses connections: nothing listens there. Start the broker (`kedro "
        "streams broker start` runs one on localhost:9092), or point the "
        "dataset's kafka.bootstrap.servers at yours.",
        True,
    ),
    (
        "SASL_PLAINTEXT credentials against the PLAINTEXT listener",
        # As docs/kafka-security.md sets them: the variables
        # conf/kafka/credentials.yml reads (PLAIN, its default mechanism).
        {},
        KAFKA_ENV,
        # Before: Kafka's IllegalSaslStateException, raw.
        "StreamingConfigError: 'raw_records': the Kafka broker at {servers} takes "
        "no SASL login on this port (a PLAINTEXT listener), while "
        "security_protocol is SASL_PLAINTEXT with a PLAIN login: use the port of "
        "the brokers' SASL_PLAINTEXT listener in kafka.bootstrap.servers, or set "
        "security_protocol to PLAINTEXT and drop the login (username, password) "
        "from the credentials.",
        True,
        {
            "env": {
                "KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
                "KAFKA_SASL_USERNAME": SASL_USER,
                "KAFKA_SASL_PASSWORD": SASL_PASSWORD,
            }
        },
    ),
    (
        "--params metric_port=0",
        {},
        ["--pipelines", "records", "--params", "metric_port=0"],
        "StreamingConfigError: --params names what nothing in this project reads "
        "(no parameter of conf/<env>/parameters*.yml, no setting of streaming.yml, "
        "no ${{runtime_params:...}} in conf/), so the run would ignore it:\n"
        "  - 'metric_port': did you mean `metrics_port`?\n"
        "Fix the name, or declare it in parameters.yml.",
        False,
    ),
    (
        "spark_ui_port taken by another program",
        {},
        [
            "--pipelines",
            "records",
            "--params",
            "trigger=available_now,spark_ui_port=<held port>",
        ],
        # Not refused: the run goes on, its UI on the next free port, said.
        "Spark UI: port {held} is taken (another run's Spark UI, or another "
        "program), so Spark took {moved}, the next free one: the UI is at "
        "http://localhost:{moved}. To choose its port, set spark_ui_port in "
        "streaming.yml (or `--params spark_ui_port=<port>`).",
        True,
        {"works": True},
    ),
    (
        "kedro streams broker start: the broker's port taken",
        # By the session's broker, as by Docker's.
        {},
        ["streams", "broker", "start"],
        "error: port {port} (kafka.bootstrap_servers of conf/kafka/globals.yml: "
        "{servers}) is taken by a Kafka broker that this command did not start "
        "(Docker's, or another project's): use that broker as it is (nothing to "
        "start), or start this one on another port: `kedro streams broker start "
        "--port <port>` (--port 0: a free one), then set kafka.bootstrap_servers "
        "in conf/<env>/globals.yml to the address it prints",
        False,
    ),
]


@pytest.mark.parametrize(
    ("edits", "arguments", "message", "spark_started", "extras"),
    [(*case[1:5], case[5] if len(case) > 5 else {}) for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_each_mistake_is_refused_before_anything_is_written(  # noqa: PLR0913, PLR0917 (the case's fields)
    project, project_bin, broker, edits, arguments, message, spark_started, extras
):
    """One mistake (its id says which), in the module's project: `kedro run`
    (or `kedro streams ...`) exits 1 with the exact message as it ends the
    output, no stack trace, Spark started or not as the case says; nothing
    written. A case that ``works`` is not refused: the run goes on, saying
    what it did instead."""
    servers = broker.bootstrap_servers
    before = set((project / "data").rglob("*"))
    with socket.socket() as held:  # a port another program has
        held.bind(("127.0.0.1", free_port()))
        held.listen()
        values = {
            "servers": servers,
            "project": project,
            "held": held.getsockname()[1],
            "free": free_port(),
            "port": servers.rpartition(":")[2],
        }
        tokens = {
            "<servers>": servers,
            "<held port>": str(values["held"]),
            "<free port>": str(values["free"]),
        }

        def filled(text: str) -> str:
            for token, value in tokens.items():
                text = text.replace(token, value)
            return text

        edits = {
            name: [(filled(old), filled(new)) for old, new in replacements]
            for name, replacements in edits.items()
        }
        command = [filled(argument) for argument in arguments]
        if command[0] != "streams":
            command.insert(0, "run")
        try:
            with mistake(project, edits):
                result = run(
                    [project_bin / "kedro", *command],
                    cwd=project,
                    check=False,
                    timeout=300,
                    env=extras.get("env"),
                )
            written = sorted(
                str(path.relative_to(project))
                for path in (project / "data").rglob("*")
                if path.is_file() and path.name != ".gitkeep"
                if "checkpoints" in path.parts or "02_intermediate" in path.parts
            )
        finally:  # what a case that works wrote, and a command's lock files
            for path in sorted(set((project / "data").rglob("*")) - before)[::-1]:
                if path.is_dir():
                    shutil.rmtree(path)
                else:
                    path.unlink()
    output = f"exit {result.returncode}\n{result.output[-3000:]}"
    assert "Traceback" not in result.output, output
    assert "register_new_resolver" not in result.output, output
    assert SASL_PASSWORD not in result.output, "a secret in the output"
    assert (SPARK_STARTED in result.output) == spark_started, output
    if extras.get("works"):
        assert result.returncode == 0, output
        moved = re.search(
            r"kedro_streaming\.session: Spark UI: http://localhost:(\d+) ",
            result.stdout,
        )
        assert moved and moved[1] != str(values["held"]), output
        wanted = message.format(**values, moved=moved[1])
        assert f"kedro_streaming.session: {wanted}" in result.stdout, output
        assert topic_ends(servers) == {READINGS: len(MESSAGES)}
        return
    # The message, as it ends the output; "…" ends the part that is ours
    # (Spark's reason follows it).
    marker = message.split(":", 1)[0] + ":"
    got = result.stderr[result.stderr.find(marker) :].strip()
    wanted = message.format(**values)
    assert result.returncode == 1, output
    if wanted.endswith("…"):
        assert got.startswith(wanted.removesuffix("…")), output
    else:
        assert got == wanted, output
    assert written == []
    assert topic_ends(servers) == {READINGS: len(MESSAGES)}


def test_validate_names_the_same_mistakes_without_running(project, project_bin):
    """`kedro streams validate` refuses what `kedro run` would, and lists every
    problem of a kind at once: the options' above, and a trigger that does
    not parse."""
    edits = {**CASES[0][1], BASE_CATALOG: [WRONG_TRIGGER]}
    with mistake(project, edits):
        result = run(
            [project_bin / "kedro", "streams", "validate", *KAFKA_ENV],
            cwd=project,
            check=False,
        )
    assert result.returncode == 1
    options = CASES[0][3].removeprefix("StreamingConfigError: ") + (
        "\n  - 'checked_records' has trigger processingTime: 'ten seconds' is not "
        "an interval Spark reads: write e.g. '10 seconds', '500 milliseconds' or "
        "'1 minute'"
    )
    assert "- " + options.replace("\n", "\n  ") in result.stderr
    assert "Traceback" not in result.output
    assert not (project / "data/kafka").exists()


FAN_OUT_PIPELINE = """\
from kedro.pipeline import Pipeline, node, pipeline
from kedro_streaming import parse_records
from pyspark.sql import DataFrame, functions as F

from ..records.nodes import check_records


def valid_only(checked: DataFrame) -> DataFrame:
    return checked.filter(F.col("rejection_reason").isNull())


def rejected_only(checked: DataFrame) -> DataFrame:
    return checked.filter(F.col("rejection_reason").isNotNull())


def create_pipeline(**kwargs) -> Pipeline:
    return pipeline(
        [
            node(
                parse_records,
                ["raw_records", "params:record_schema"],
                "parsed",
                name="parse_records",
            ),
            node(
                check_records,
                ["parsed", "params:record_expectations"],
                "checked",
                name="check_records",
            ),
            node(valid_only, "checked", "valid_records", name="valid_only"),
            node(rejected_only, "checked", "rejected_records", name="rejected_only"),
        ]
    )
"""
FAN_OUT_CATALOG = "\n".join(
    f"""{name}:
  type: kedro_streaming.SparkStreamingDataset
  filepath: ${{globals:output_root}}/02_intermediate/{name}
  file_format: parquet
  save_args:
    checkpoint: ${{globals:output_root}}/checkpoints/{name}
"""
    for name in ("valid_records", "rejected_records")
)


def test_fan_out_said_and_counted_once_then_a_checkpoint_deleted_under_its_table(
    project, project_bin, tmp_path
):
    """One checked DataFrame to two sinks: two queries, each reading the
    landing folder and checking every record. The run says so, and the
    quarantine is counted once: the shipped landing file holds 6 records, of
    which 3 are rejected (one too hot, one not a number, one without a
    device)."""
    fan_out = tmp_path / "fan-out"
    shutil.copytree(project, fan_out, ignore=shutil.ignore_patterns("data"))
    shutil.copytree(project / "data/01_raw", fan_out / "data/01_raw")
    ui_port = free_port()
    package = fan_out / "src/sensor_lab/pipelines/fanout"
    package.mkdir()
    (package / "__init__.py").write_text("from .pipeline import create_pipeline\n")
    (package / "pipeline.py").write_text(FAN_OUT_PIPELINE)
    (fan_out / "conf/base/catalog_fanout.yml").write_text(FAN_OUT_CATALOG)

    # Its own virtualenv, as the session's: the fan-out project installed in
    # the shared one would change the package under the tests beside it.
    project_bin = venv_like(project_bin, tmp_path / "venv")
    pip = [project_bin / "python", "-m", "pip", "install", "-q", "--no-deps"]
    run([*pip, "-e", fan_out], cwd=fan_out)
    bounded = [
        "--pipelines",
        "fanout",
        "--params",
        "trigger=available_now,metrics_port=0",
    ]
    result = run(
        [
            *(project_bin / "kedro", "run", *bounded[:-1]),
            f"{bounded[-1]},spark_ui_port={ui_port}",
        ],
        cwd=fan_out,
    )
    # Then the checkpoint of one sink deleted under its table: Spark's file
    # sink skips each batch id its folder's log already has, so the next
    # run would read everything, record it as done, and write nothing.
    table = fan_out / "data/02_intermediate/valid_records"
    written = sorted(p.name for p in table.glob("*.parquet"))
    shutil.rmtree(fan_out / "data/checkpoints/valid_records")
    again = run([project_bin / "kedro", "run", *bounded], cwd=fan_out, check=False)
    assert again.returncode == 1
    assert again.stderr.strip().endswith(
        "StreamingConfigError: Streaming configuration in conf/ cannot work:\n"
        f"  - 'valid_records' has a new checkpoint, but its folder '{table}' "
        "already holds 1 batches written under an earlier one: Spark's file sink "
        "would skip as many batches of the new query without writing them. Start "
        "both afresh with `kedro streams reset valid_records`, or give the sink a "
        "new folder"
    )
    assert sorted(p.name for p in table.glob("*.parquet")) == written != []
    assert not (fan_out / "data/checkpoints/valid_records").exists()
    # One line per event off a terminal, the Spark UI on the port --params
    # said, and on this machine only (as shipped).
    assert f"kedro_streaming.session: Spark UI: http://localhost:{ui_port} " in (
        result.stdout
    )
    lines = [
        line.split(": ", 1)[1]
        for line in result.stdout.splitlines()
        if "kedro_streaming.queries:" in line
    ]
    assert (
        "Fan-out: queries rejected_records, valid_records each read raw_records "
        "and run parse_records, check_records on their own: 2 reads of the source "
        "and checks of every record. To read and check once, write the shared "
        'output to a sink and read that sink (docs/operating.md, "One source, '
        'several sinks").'
    ) in lines
    assert (
        "'valid_records' runs the same checks as rejected_records before it "
        "(fan-out): their figures (expectations) are reported under "
        "rejected_records only."
    ) in lines
    ended = sorted(line for line in lines if line.startswith("Query "))
    # The figures, from the landing files by the schema's and the rule's terms.
    records = [
        json.loads(line)
        for path in sorted((fan_out / "data/01_raw/records_landing").glob("*.json"))
        for line in path.read_text().splitlines()
    ]
    unparsed = sum(
        "device" not in r or not isinstance(r.get("temperature_c"), int | float)
        for r in records
    )
    too_hot = sum(
        "device" in r
        and isinstance(r.get("temperature_c"), int | float)
        and not -50 <= r["temperature_c"] <= 60
        for r in records
    )
    rejected, total = unparsed + too_hot, len(records)
    assert ended == [
        f"Query rejected_records ended: 1 batches, {total} rows in, {rejected} "
        f"written, {rejected} quarantined, expectations: unparsed {unparsed}, "
        f"temperature_plausible {too_hot}.",
        f"Query valid_records ended: 1 batches, {total} rows in, "
        f"{total - rejected} written, 0 quarantined.",
    ]
