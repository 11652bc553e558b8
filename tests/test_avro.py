"""Avro on the wire, in Confluent's framing, against the session's real schema
registry (Apicurio Registry) and real broker: the example's trips decoded each
with its writer schema, a schema version registered while the run goes on,
each kind of bad frame quarantined with its reason, schemas that outlive a
registry restart. Every figure is compared with the reference computed from
the JSON records the Avro ones were made from."""

from __future__ import annotations

import importlib
import json
import os
import re
import signal
import time

import pandas as pd
from kafka import KafkaProducer
from reference import decode, example_settings, expected_outputs, zone_boroughs
from support import (
    assert_matches_reference,
    assert_progress_log,
    batch_ids,
    bundled_lines,
    committed_files,
    kedro_run,
    offset_log,
    point_at_broker,
    replay,
    run,
    start_continuous_kafka_run,
)


def use_registry(project, registry_url: str) -> None:
    """conf/kafka reads the trips as Avro, from the registry at ``registry_url``."""
    with (project / "conf/kafka/globals.yml").open("a") as globals_file:
        globals_file.write(
            f"  schema_registry_url: {registry_url}\n"
            "  trips_avro:\n"
            "    schema_registry_url: ${kafka.schema_registry_url}\n"
            "    credentials: schema_registry\n"
        )


def committed(project, table: str) -> pd.DataFrame | None:
    """The rows a parquet sink of the Kafka environment has committed."""
    folder = project / "data/kafka/02_intermediate" / table
    log = folder / "_spark_metadata"
    if not log.is_dir() or not any(path.name[0].isdigit() for path in log.iterdir()):
        return None
    return pd.concat(pd.read_parquet(path) for path in committed_files(folder))


def bronze_rows(project) -> int:
    """Rows bronze has committed (valid and rejected trips)."""
    bronze = committed(project, "bronze_trips")
    return 0 if bronze is None else len(bronze)


def caught_up(project, query: str) -> bool:
    """A query reading bronze has committed a batch up to bronze's last one,
    and has none running (a batch planned when the run stops is not
    written, while its offsets are)."""
    tables = project / "data/kafka"
    written = [
        int(path.name.split(".")[0])
        for path in (tables / "02_intermediate/bronze_trips/_spark_metadata").iterdir()
        if path.name[0].isdigit()
    ]
    checkpoint = tables / "checkpoints" / query
    planned, done = batch_ids(checkpoint / "offsets"), batch_ids(checkpoint / "commits")
    return (
        bool(written)
        and bool(planned)
        and planned == done
        and offset_log(checkpoint)[-1]["logOffset"] == max(written)
    )


def wait_for(condition, process, log, what: str, seconds: float = 180) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert process.poll() is None, log.read_text()[-5000:]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(1)


def test_avro_trips_across_a_schema_version_registered_mid_stream(  # noqa: PLR0914, PLR0915, PLR0917 (fixtures; one story)
    generated_project,
    project_bin,
    project_tool,
    plugin_tool,
    broker,
    schema_registry,
    tmp_path,
):
    """Wave 1 in schema version 1 through `tools trips send --format avro`;
    while the run goes on, version 2 (a new optional field) is registered and
    wave 2 sent in it: the run plans the ingest query again by itself, and
    every table and progress record equals the reference's over the same
    micro-batches; no trip is quarantined for its encoding."""
    trips = project_tool("trips")
    registry_module = importlib.import_module("kedro_streaming.schema_registry")
    plugin_tool("kafka")  # the plugin's source on the path
    project = tmp_path / "avro"
    run(["cp", "-a", str(generated_project), str(project)], cwd=tmp_path)
    servers = broker.bootstrap_servers
    topic, _ = point_at_broker(project, servers, 10_000)
    use_registry(project, schema_registry["url"])
    lines = bundled_lines(project)
    first_files = 4
    wave_1 = [
        line for index in range(first_files) for line in trips.trip_records(index)
    ]
    assert lines[: len(wave_1)] == wave_1

    sent = run(
        [
            *(project_bin / "python", "-m", "tools", "trips", "send", "--format"),
            *("avro", "--files", str(first_files), "--partitions", "1"),
        ],
        cwd=project,
    )
    # A trip whose field has another type, or a line that is not JSON, cannot
    # be written in Avro: the producer says so, and sends the others.
    unfit = [line for line in sent.stderr.splitlines() if line.startswith("Not sent:")]
    assert len(unfit) == first_files + 1  # "two" passengers in each, one truncated
    assert all("passenger_count 'two' is not int" in u for u in unfit[:1])
    fitting = []
    for line in wave_1:
        try:
            trips.avro_trip(line, 1)
        except ValueError:
            continue
        fitting.append(line)
    assert f"Sent {len(fitting)} messages" in sent.stdout

    log = project / "continuous.log"
    process = start_continuous_kafka_run(
        project_bin,
        project,
        log,
        "--pipelines",
        "ingest,aggregate",
        params="metrics_port=0",
    )
    try:
        wait_for(lambda: bronze_rows(project) == len(fitting), process, log, "wave 1")
        # Version 2, registered while the run goes on, and wave 2 in it.
        registry = registry_module.SchemaRegistry(schema_registry["url"])
        frame = registry_module.avro_framer(
            registry, f"{topic}-value", trips.trip_avro_schema(2)
        )
        wave_2 = []
        producer = KafkaProducer(bootstrap_servers=servers, acks="all")
        try:
            for line in lines[len(wave_1) :]:
                try:
                    record = trips.avro_trip(line, 2)
                except ValueError:
                    continue
                producer.send(topic, value=frame(record), key=trips.message_key(line))
                wave_2.append(line)
            producer.flush()
        finally:
            producer.close()
        fitting += wave_2
        wait_for(lambda: bronze_rows(project) == len(fitting), process, log, "wave 2")
        # The queries that read bronze, too: all of it, each batch committed.
        for query in ("quarantined_trips", "hourly_borough_summary"):
            wait_for(lambda q=query: caught_up(project, q), process, log, query)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=120) == 0, log.read_text()[-5000:]
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)

    output = log.read_text()
    replans = re.findall(
        r"Streaming query '(\w+)' met Avro schema id (\d+), (\w+)", output
    )
    version_2 = registry.version(f"{topic}-value", 2)
    assert replans == [("bronze_trips", str(version_2.id), "registered")], output[
        -3000:
    ]

    messages = {
        (topic, 0, offset): line.encode() for offset, line in enumerate(fitting)
    }
    expected = replay(project, "data/kafka", "bronze_trips", messages)
    expected.summary = replay(
        project, "data/kafka", "hourly_borough_summary", messages
    ).written
    assert_matches_reference(project, expected, "data/kafka")
    assert_progress_log(project, "data/kafka", messages)


def test_bad_frames_are_quarantined_and_schemas_outlive_a_registry_restart(  # noqa: PLR0917 (fixtures)
    generated_project,
    project_bin,
    project_tool,
    plugin_tool,
    broker,
    schema_registry,
    tmp_path,
):
    """A wrong magic byte, a truncated frame, an id the registry lacks, a body
    its writer schema does not decode, and a tombstone each land in bronze's
    quarantine with their reason; good frames sent before the registry was
    restarted decode after it (its schemas are kept on disk)."""
    trips = project_tool("trips")
    registry_module = importlib.import_module("kedro_streaming.schema_registry")
    project = tmp_path / "bad-frames"
    run(["cp", "-a", str(generated_project), str(project)], cwd=tmp_path)
    servers = broker.bootstrap_servers
    topic, _ = point_at_broker(project, servers, 10_000)
    use_registry(project, schema_registry["url"])

    registry = registry_module.SchemaRegistry(schema_registry["url"])
    frame = registry_module.avro_framer(
        registry, f"{topic}-value", trips.trip_avro_schema(1)
    )
    good_lines = [line for line in trips.trip_records(0)[:12] if _fits(trips, line)]
    good = [frame(trips.avro_trip(line, 1)) for line in good_lines]
    header = good[0][:5]
    unknown_id = 987_654
    bad = {
        b"\x07"
        + good[0][1:]: "not in Confluent's wire format: magic byte 7, 0 expected",
        good[0][:3]: "truncated frame: 3 bytes, Confluent's wire format has at least 5",
        b"\x00" + unknown_id.to_bytes(4, "big") + good[0][5:]: (
            f"unknown schema id {unknown_id}: the schema registry at "
            f"{schema_registry['url']} has none"
        ),
        header + b"\xff" * 3: (
            f"does not decode with its writer schema (id {int.from_bytes(header[1:], 'big')})"
        ),
        None: "null value (a tombstone)",
    }
    producer = KafkaProducer(bootstrap_servers=servers, acks="all")
    try:
        for value in [*good[:6], *bad, *good[6:]]:
            producer.send(topic, key=b"trip", value=value, partition=0)
        producer.flush()
    finally:
        producer.close()

    # The registry restarted, as the docs say: the same folder, the same port.
    registry_cli = [
        project_bin / "python",
        "-m",
        "kedro_streaming.devtools",
        "registry",
    ]
    data = ["--data-dir", schema_registry["data"]]
    run([*registry_cli, "stop", *data], cwd=project)
    assert (
        run([*registry_cli, "status", *data], cwd=project, check=False).returncode == 3
    )
    started = run(
        [*registry_cli, "start", *data, "--port", str(schema_registry["port"])],
        cwd=project,
    )
    assert started.stdout.strip() == schema_registry["url"]

    # The registry's address without its API path: refused before any query.
    globals_file = project / "conf/kafka/globals.yml"
    right = globals_file.read_text()
    root = schema_registry["url"].rsplit("/apis", 1)[0]
    globals_file.write_text(right.replace(schema_registry["url"], root))
    refused = kedro_run(
        project_bin, project, "--env", "kafka", "--pipelines", "ingest", check=False
    )
    assert refused.returncode == 1
    assert (
        "Avro sources cannot start:\n  - 'raw_trips': "
        f"{root} is not a schema registry's API root"
    ) in refused.stderr, refused.output[-3000:]
    assert "Started streaming query" not in refused.output
    globals_file.write_text(right)

    ran = kedro_run(project_bin, project, "--env", "kafka", "--pipelines", "ingest")
    assert re.findall(r"met Avro schema id (\d+), (\w+)", ran.output) == [
        (str(unknown_id), "which")
    ]
    bronze = pd.concat(
        pd.read_parquet(path)
        for path in committed_files(project / "data/kafka/02_intermediate/bronze_trips")
    )
    rejected = bronze[bronze.rejection_reason.notna()].sort_values("kafka_offset")
    by_offset = dict(zip(rejected.kafka_offset, rejected.rejection_reason, strict=True))
    assert {offset: by_offset.get(offset) for offset in range(6, 11)} == {
        6 + number: reason for number, reason in enumerate(bad.values())
    }
    # The good frames: what the reference makes of the JSON records they
    # were made from (a trip may break an expectation, as in JSON).
    expected = expected_outputs(
        [[decode(line.encode()) for line in good_lines]],
        zone_boroughs(project / "data/01_raw/taxi_zone_lookup.csv"),
        example_settings(project),
    )
    from_good = bronze[~bronze.kafka_offset.between(6, 10)]
    assert len(from_good) == len(good) and len(bronze) == len(good) + len(bad)
    assert from_good.rejection_reason.isna().sum() == len(expected.bronze)
    assert from_good.rejection_reason.dropna().value_counts().to_dict() == dict(
        expected.rejections
    )


def _fits(trips, line: str) -> bool:
    try:
        trips.avro_trip(line, 1)
    except ValueError:
        return False
    return True


# Each mistake's message, as `avro_schemas` (asked by the checks before any
# query starts, and by `kedro streams validate`) gives it.
MISTAKES = """
import json, sys
from kedro_streaming import SparkStreamingDataset
from kedro_streaming.errors import StreamingConfigError

url, topic = sys.argv[1], sys.argv[2]
cases = {
    "a misspelt key": ({"schema_registry_uri": url}, topic),
    "not the API root": ({"schema_registry_url": url.rsplit("/apis", 1)[0]}, topic),
    "no registry there": ({"schema_registry_url": "http://127.0.0.1:9/x"}, topic),
    "a wrong subject": ({"schema_registry_url": url, "subject": topic + "-values"}, topic),
    "two topics, no subject": ({"schema_registry_url": url}, topic + ",other"),
}
for case, (avro, subscribe) in cases.items():
    dataset = SparkStreamingDataset(
        file_format="kafka", load_args={"subscribe": subscribe}, avro=avro
    )
    try:
        dataset.avro_schemas
        print(json.dumps([case, None]))
    except StreamingConfigError as error:
        print(json.dumps([case, str(error)]))
"""


def test_each_avro_mistake_is_named(
    project_bin, project_tool, schema_registry, tmp_path
):
    """A misspelt key, an address that is not the API root, no registry, a
    subject that is not there, several topics without a subject: each named
    with its fix, the registry's address never with a password."""
    trips = project_tool("trips")
    registry_module = importlib.import_module("kedro_streaming.schema_registry")
    url, topic = schema_registry["url"], f"mistakes-{time.monotonic_ns()}"
    registry = registry_module.SchemaRegistry(url)
    registry.register(f"{topic}-value", trips.trip_avro_schema(1))
    ran = run([project_bin / "python", "-c", MISTAKES, url, topic], cwd=tmp_path)
    messages = dict(  # after Kedro's own logging line
        json.loads(line) for line in ran.stdout.splitlines() if line.startswith('["')
    )
    root = url.rsplit("/apis", 1)[0]
    assert messages == {
        "a misspelt key": "its `avro` option has 'schema_registry_uri' (did you mean "
        "'schema_registry_url'?), which it does not read; its keys: "
        "schema_registry_url, subject, version, credentials",
        "not the API root": f"{root} is not a schema registry's API root: it has no "
        "/subjects. Give the root of Confluent's API (Apicurio serves it under "
        "/apis/ccompat/v7)",
        "no registry there": "the schema registry at http://127.0.0.1:9/x did not "
        "answer ([Errno 111] Connection refused): check schema_registry_url, and "
        "that the registry runs (`kedro streams registry start` runs one here)",
        "a wrong subject": f"the schema registry at {url} has no subject "
        f"'{topic}-values' (it has '{topic}-value'): register its schema first, or "
        "check the subject's name (<topic>-value by default)",
        "two topics, no subject": "its `avro` option needs a `subject`: it reads "
        f"{topic},other, not one topic whose <topic>-value subject to read",
    }
