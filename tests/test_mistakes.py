"""The mistakes people make when they edit a generated project for their own
stream, each made in the walkthrough's project (its Kafka source, its
alerts pipeline) and refused before any query starts: the exact message,
no stack trace, and nothing written (no checkpoint, no table, no message).

Each case is one `kedro run` as a user types it, so the message is the one
the user reads; those refused before Spark starts show that too.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path

import pytest
from kafka import KafkaConsumer, TopicPartition
from support.common import SPARK_VERSION, free_port, run
from support.kafka import send_to_one_partition
from support.project import walkthrough_project

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
        "not exist (beside it: '{project}/data/01_raw/records_landing'): fix its filepath, or, if "
        "another pipeline's sink writes it, run that pipeline first (`kedro run "
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
        "  - 'trigger_intervall': did you mean 'trigger_interval'?\n"
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
        "conf/<env>/parameters*.yml: did you mean 'params:records_schema'?",
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
        "a --params name misspelt, which Kedro alone would ignore",
        {},
        ["--pipelines", "records", "--params", "triger=available_now"],
        "StreamingConfigError: --params names what nothing in this project reads "
        "(no parameter of conf/<env>/parameters*.yml, no setting of streaming.yml, "
        "no ${{runtime_params:...}} in conf/), so the run would ignore it:\n"
        "  - 'triger': did you mean 'trigger'?\n"
        "Fix the name, or declare it in parameters.yml.",
        False,
    ),
]


@pytest.mark.parametrize(
    ("edits", "arguments", "message", "spark_started"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_each_mistake_is_refused_before_anything_is_written(  # noqa: PLR0917 (the case's fields)
    project, project_bin, broker, edits, arguments, message, spark_started
):
    """One mistake (its id says which), in the module's project: `kedro run`
    exits 1 with the exact message as it ends the output, no stack trace,
    Spark started or not as the case says; nothing written."""
    servers = broker.bootstrap_servers
    with mistake(project, edits):
        result = run(
            [project_bin / "kedro", "run", *arguments],
            cwd=project,
            check=False,
            timeout=300,
        )
    # The message, as it ends the output; "…" ends the part that is ours
    # (Spark's reason follows it).
    got = result.stderr[result.stderr.find("StreamingConfigError:") :].strip()
    wanted = message.format(servers=servers, project=project)
    output = f"exit {result.returncode}\n{result.output[-3000:]}"
    assert result.returncode == 1, output
    if wanted.endswith("…"):
        assert got.startswith(wanted.removesuffix("…")), output
    else:
        assert got == wanted, output
    assert "Traceback" not in result.output, output
    assert "register_new_resolver" not in result.output, output
    assert (SPARK_STARTED in result.output) == spark_started, output
    written = sorted(
        str(path.relative_to(project))
        for path in (project / "data").rglob("*")
        if path.is_file() and path.name != ".gitkeep"
        if "checkpoints" in path.parts or "02_intermediate" in path.parts
    )
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

    def install(folder: Path) -> None:
        pip = [project_bin / "python", "-m", "pip", "install", "-q", "--no-deps"]
        run([*pip, "-e", folder], cwd=folder)

    bounded = [
        "--pipelines",
        "fanout",
        "--params",
        "trigger=available_now,metrics_port=0",
    ]
    install(fan_out)
    try:
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
    finally:  # the module's project again in the shared virtualenv
        install(project)
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
