"""Avro on the wire, in Confluent's framing, against the session's real schema
registry (Apicurio Registry) and real broker: the example's trips decoded each
with its writer schema, a schema version registered while the run goes on,
each kind of bad frame quarantined with its reason, schemas that outlive a
registry restart. Every figure is compared with the reference computed from
the JSON records the Avro ones were made from."""

from __future__ import annotations

import base64
import importlib
import json
import os
import re
import signal
import time
import urllib.request
from collections import Counter

import pandas as pd
import pytest
import yaml
from kafka import KafkaProducer
from reference import check, decode, example_settings, expected_outputs, zone_boroughs
from support.checkpoints import batch_ids, committed_files, offset_log, replay
from support.common import kedro_run, run
from support.compare import assert_matches_reference, assert_progress_log
from support.kafka import (
    assert_same_trip,
    avro_values,
    point_at_broker,
    read_topics,
    send_to_one_partition,
)
from support.processes import start_continuous_kafka_run, start_kedro, wait_for
from support.project import bundled_lines


def use_registry(project, registry_url: str) -> None:
    """conf/kafka reads the trips as Avro, from the registry at ``registry_url``."""
    with (project / "conf/kafka/globals.yml").open("a") as globals_file:
        globals_file.write(
            f"  schema_registry_url: {registry_url}\n"
            "  trips_avro:\n"
            "    schema_registry_url: ${kafka.schema_registry_url}\n"
            "    credentials: schema_registry\n"
        )


UNKNOWN_ID = 987_654
# What follows the registry's words when it refuses a schema: the ways out.
REFUSAL_FIX = (
    "The subject's compatibility is BACKWARD: make a change it allows (a new "
    "field with a default), write to a new subject, or change the subject's rule "
    '(PUT {url}/config/{subject} with {{"compatibility": "NONE"}} lets any change '
    "through)"
)


def global_compatibility(url: str, method: str = "GET", level: str = "") -> str:
    """The registry's global compatibility, through Confluent's API at ``url``
    (``/config``); PUT sets it, DELETE removes it."""
    body = json.dumps({"compatibility": level}).encode() if level else None
    request = urllib.request.Request(
        f"{url}/config",
        data=body,
        method=method,
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        shown = json.loads(answer.read())
    return shown.get("compatibilityLevel") or shown.get("compatibility")


def bad_frames(good: bytes, registry_url: str) -> dict[bytes | None, str]:
    """Each kind of bad frame, made from a good one, and the reason its
    record must be quarantined with."""
    header = good[:5]
    writer_id = int.from_bytes(header[1:], "big")
    return {
        b"\x07" + good[1:]: "not in Confluent's wire format: magic byte 7, 0 expected",
        good[:3]: "truncated frame: 3 bytes, Confluent's wire format has at least 5",
        b"\x00" + UNKNOWN_ID.to_bytes(4, "big") + good[5:]: (
            f"unknown schema id {UNKNOWN_ID}: the schema registry at "
            f"{registry_url} has none"
        ),
        header + b"\xff" * 3: (
            f"does not decode with its writer schema (id {writer_id})"
        ),
        None: "null value (a tombstone)",
    }


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
    registry_module = importlib.import_module("kedro_streaming")
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


def test_a_send_whose_schema_its_subject_refuses_sends_nothing(  # noqa: PLR0917 (fixtures)
    fresh_project, project_bin, project_tool, broker, schema_registry, plugin_tool
):  # plugin_tool: the plugin's source on the path
    """The registry's global compatibility is BACKWARD from its start. A topic
    whose subject's version 1 has PULocationID as text, and one message in
    it: `tools trips send --format avro` (PULocationID an int) is refused
    before it sends anything, quoting the registry, naming the subject and
    the ways out."""
    trips = project_tool("trips")
    registry_module = importlib.import_module("kedro_streaming")
    url = schema_registry["url"]
    registry = registry_module.SchemaRegistry(url)
    assert global_compatibility(url) == "BACKWARD"  # Apicurio's own: NONE
    assert registry.compatibility() == "BACKWARD"
    servers = broker.bootstrap_servers
    topic, _ = point_at_broker(fresh_project, servers)
    use_registry(fresh_project, url)
    subject = f"{topic}-value"
    earlier = json.loads(trips.trip_avro_schema(1))
    located = next(f for f in earlier["fields"] if f["name"] == "PULocationID")
    located["type"] = ["null", "string"]
    frame = registry_module.avro_framer(registry, subject, json.dumps(earlier))
    send_to_one_partition(servers, topic, [frame({"PULocationID": "74"})])

    sent = run(
        [
            *(project_bin / "python", "-m", "tools", "trips", "send"),
            *("--format", "avro", "--files", "1"),
        ],
        cwd=fresh_project,
        check=False,
    )
    assert (sent.returncode, sent.stdout) == (1, ""), sent.output
    position = [f["name"] for f in earlier["fields"]].index("PULocationID")
    errors = [
        line
        for line in without_tries(sent.stderr).splitlines()
        if line.startswith("error:")
    ]
    assert errors == [
        f"error: the schema registry at {url} refused a new version of subject "
        f"'{subject}' (HTTP 409): "
        "io.apicurio.registry.rules.violation.RuleViolationException: "
        f"Incompatible artifact: {subject} [AVRO], num of incompatible diffs: "
        "{1}, list of diff types: [reader union lacking writer type: STRING at "
        f"/fields/{position}/type/1]. {REFUSAL_FIX.format(url=url, subject=subject)}"
    ], sent.stderr
    assert len(read_topics(servers, [topic])) == 1  # the earlier one only
    assert [v.version for v in registry.versions(subject)] == [1]


def test_a_registry_that_says_not_now_is_asked_again(
    schema_registry, rate_limited_registry, plugin_tool
):  # plugin_tool: the plugin's source on the path
    """Through a gateway that limits the rate (HTTP 429), every schema of a
    subject is read whole, each refused request sent again; with retries
    off, the refusal names the status, without the gateway's HTML page."""
    registry_module = importlib.import_module("kedro_streaming")
    errors = importlib.import_module("kedro_streaming.errors")
    direct = registry_module.SchemaRegistry(schema_registry["url"])
    subject = f"rate-limited-{time.time_ns()}-value"
    versions = [
        json.dumps({"type": "record", "name": "Ride", "fields": fields})
        for fields in (
            [{"name": "id", "type": "long"}],
            [
                {"name": "id", "type": "long"},
                {"name": "note", "type": ["null", "string"], "default": None},
            ],
        )
    ]
    ids = [direct.register(subject, schema) for schema in versions]

    # What planning a query asks, back to back: every version, then the latest.
    url, access_log = rate_limited_registry
    limited = registry_module.SchemaRegistry(url)
    read = limited.versions(subject)
    assert [(v.id, v.schema) for v in read] == [(i, direct.schema(i)) for i in ids]
    assert limited.version(subject).id == ids[1]

    def statuses() -> Counter:
        lines = access_log.read_text().splitlines()
        return Counter(line.split('" ')[1].split()[0] for line in lines)

    # nginx logs a request once its answer is sent: the last line may lag.
    deadline = time.monotonic() + 5
    while statuses()["200"] < 4 and time.monotonic() < deadline:
        time.sleep(0.1)
    # The versions, each version, the latest: 4 answered, each after a 429.
    assert statuses()["200"] == 4 and statuses()["429"] >= 4, statuses()

    limited.retry_waits = ()
    with pytest.raises(errors.StreamingConfigError) as refused:
        limited.subjects()
        limited.subjects()
    assert str(refused.value) == (
        f"the schema registry at {url} refused the request (HTTP 429): "
        "Too Many Requests"
    )


def test_bad_frames_quarantined_schemas_kept_and_the_summary_sent_as_avro(  # noqa: PLR0914, PLR0915, PLR0917 (fixtures; one story)
    generated_project,
    project_bin,
    project_tool,
    plugin_tool,
    broker,
    schema_registry,
    registry_login,
    tmp_path,
    monkeypatch,
):
    """Through a registry that asks for a login (a wrong password refused
    before start): a wrong magic byte, a truncated frame, an id the registry
    lacks, a body its writer schema does not decode, and a tombstone each
    land in bronze's quarantine with their reason; good frames sent before
    the registry was restarted decode after it (its schemas are kept on
    disk). The summary
    then goes out as Avro, and a schema change its subject refuses stops the
    next run before it starts."""
    trips = project_tool("trips")
    registry_module = importlib.import_module("kedro_streaming")
    project = tmp_path / "bad-frames"
    run(["cp", "-a", str(generated_project), str(project)], cwd=tmp_path)
    servers = broker.bootstrap_servers
    topic, summary_topic = point_at_broker(project, servers, 10_000)
    # The registry behind a login, from conf/kafka/credentials.yml's
    # environment variables, as docs/avro.md sets it.
    url = registry_login["url"]
    monkeypatch.setenv("SCHEMA_REGISTRY_USERNAME", registry_login["username"])
    monkeypatch.setenv("SCHEMA_REGISTRY_PASSWORD", registry_login["password"])
    use_registry(project, url)

    registry = registry_module.SchemaRegistry(
        url, registry_login["username"], registry_login["password"]
    )
    frame = registry_module.avro_framer(
        registry, f"{topic}-value", trips.trip_avro_schema(1)
    )
    good_lines = [line for line in trips.trip_records(0)[:12] if _fits(trips, line)]
    good = [frame(trips.avro_trip(line, 1)) for line in good_lines]
    bad = bad_frames(good[0], url)
    producer = KafkaProducer(bootstrap_servers=servers, acks="all")
    try:
        for value in [*good[:6], *bad, *good[6:]]:
            producer.send(topic, key=b"trip", value=value, partition=0)
        producer.flush()
    finally:
        producer.close()

    # The registry restarted, as the docs say: the same folder, the same port.
    # Its global compatibility is BACKWARD, as Confluent's registry's, unless
    # one was set: a rule set through the API outlives the restart.
    assert global_compatibility(schema_registry["url"]) == "BACKWARD"
    global_compatibility(schema_registry["url"], "PUT", "FULL")
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
    assert ", global compatibility FULL, log " in started.stderr, started.stderr
    assert global_compatibility(schema_registry["url"]) == "FULL"
    global_compatibility(schema_registry["url"], "DELETE")  # the default again
    assert global_compatibility(schema_registry["url"]) == "BACKWARD"

    # A wrong password: refused before any query, naming the registry and
    # the user, never the password.
    monkeypatch.setenv("SCHEMA_REGISTRY_PASSWORD", "not-" + registry_login["password"])
    refused = kedro_run(
        project_bin, project, "--env", "kafka", "--pipelines", "ingest", check=False
    )
    assert refused.returncode == 1
    assert (
        f"'raw_trips': the schema registry at {url} refused user "
        f"'{registry_login['username']}' (HTTP 401)"
    ) in refused.stderr, refused.output[-3000:]
    assert "Started streaming query" not in refused.output
    assert registry_login["password"] not in refused.output
    monkeypatch.setenv("SCHEMA_REGISTRY_PASSWORD", registry_login["password"])

    # The registry's address without its API path: refused before any query.
    globals_file = project / "conf/kafka/globals.yml"
    right = globals_file.read_text()
    root = url.rsplit("/apis", 1)[0]
    globals_file.write_text(right.replace(url, root))
    refused = kedro_run(
        project_bin, project, "--env", "kafka", "--pipelines", "ingest", check=False
    )
    assert refused.returncode == 1
    assert (
        "Avro datasets cannot start:\n  - 'raw_trips': "
        f"{root} is not a schema registry's API root"
    ) in refused.stderr, refused.output[-3000:]
    assert "Started streaming query" not in refused.output
    globals_file.write_text(right)

    ran = kedro_run(project_bin, project, "--env", "kafka", "--pipelines", "ingest")
    assert re.findall(r"met Avro schema id (\d+), (\w+)", ran.output) == [
        (str(UNKNOWN_ID), "which")
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

    # The summary topic as Avro: its schema derived from the rows and
    # registered at start; each message one row of the summary table, every
    # figure, decoded by fastavro with the schema its id names.
    with globals_file.open("a") as conf:
        conf.write(
            "  messages_avro:\n    schema_registry_url: ${kafka.schema_registry_url}\n"
            "    credentials: schema_registry\n"
        )
    # Three more hours of trips, for windows the watermark closes.
    later = [
        frame(trips.avro_trip(line, 1))
        for index in (1, 2, 3)
        for line in trips.trip_records(index)
        if _fits(trips, line)
    ]
    send_to_one_partition(servers, topic, later)
    publish = ["--env", "kafka", "--pipelines", "ingest,aggregate,publish"]
    kedro_run(project_bin, project, *publish)
    subject = f"{summary_topic}-value"
    published = registry.version(subject)
    table = pd.concat(
        pd.read_parquet(path)
        for path in committed_files(
            project / "data/kafka/08_reporting/hourly_borough_summary"
        )
    )
    values = avro_values(registry, read_topics(servers, [summary_topic]))
    assert len(table) > 0
    assert {schema_id for schema_id, _ in values} == {published.id}
    rows = lambda frame: sorted(  # noqa: E731
        tuple(row) for row in frame[list(table.columns)].itertuples(index=False)
    )
    assert rows(pd.DataFrame([value for _, value in values])) == rows(table)
    assert [f["name"] for f in json.loads(published.schema)["fields"]] == list(
        table.columns
    )

    # A change the registry's default compatibility (BACKWARD, no rule set
    # for the subject) refuses: the node now sends trip_count as text, which
    # a reader of the numbers cannot read. The run fails before any query
    # starts, quoting the registry, and says the ways out.
    nodes = next(project.glob("src/*/pipelines/publish/nodes.py"))
    nodes.write_text(
        nodes.read_text().replace(
            'F.struct(*hourly_borough_summary.columns).alias("value")',
            'F.struct(*hourly_borough_summary.columns).withField("trip_count", '
            'F.col("trip_count").cast("string")).alias("value")',
        )
    )
    refused = kedro_run(project_bin, project, *publish, check=False)
    assert refused.returncode == 1
    trip_count = list(table.columns).index("trip_count")
    assert (
        f"'hourly_borough_summary_messages': the schema registry at "
        f"{url} refused a new version of subject '{subject}' (HTTP 409): "
        "io.apicurio.registry.rules.violation.RuleViolationException: "
        f"Incompatible artifact: {subject} [AVRO], num of incompatible diffs: "
        "{1}, list of diff types: [reader union lacking writer type: LONG at "
        f"/fields/{trip_count}/type/1]. "
        f"{REFUSAL_FIX.format(url=url, subject=subject)}"
    ) in without_tries(refused.stderr), refused.output[-3000:]
    assert "Started streaming query" not in refused.output
    assert [v.version for v in registry.versions(subject)] == [1]


def without_tries(text: str) -> str:
    """``text`` less the count of tries a registry request took (", 2 tries in
    0.3 s"): the real proxy and registry can answer a try with a transient
    error the client asks again after, which a test cannot know ahead."""
    return re.sub(r", \d+ tries in [\d.]+ s\)", ")", text)


def _fits(trips, line: str) -> bool:
    try:
        trips.avro_trip(line, 1)
    except ValueError:
        return False
    return True


# Each mistake's message, as `avro.schemas` (asked by the checks before any
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
        dataset.avro.schemas
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
    registry_module = importlib.import_module("kedro_streaming")
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
        "`schema_registry_url`?), which it does not read; its keys: "
        "schema_registry_url, subject, version, key_subject, credentials",
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


def test_realtime_mode_reads_and_writes_avro(  # noqa: PLR0912, PLR0914, PLR0915, PLR0917 (fixtures; one story)
    generated_project,
    project_bin,
    project_tool,
    plugin_tool,
    broker,
    schema_registry,
    tmp_path,
):
    """Real-Time Mode with Avro in and out, the reader pinned to version 1,
    keys in Avro too (`key_subject`):
    trips in schema versions 1 and 2, each kind of bad frame, a bad key and
    a message without a key go in; every message comes out on the topic of
    its verdict, in Avro under that topic's own subject, with the reason,
    fields and zones the reference gives it."""
    trips = project_tool("trips")
    registry_module = importlib.import_module("kedro_streaming")
    plugin_tool("kafka")
    project = tmp_path / "realtime-avro"
    run(["cp", "-a", str(generated_project), str(project)], cwd=tmp_path)
    servers = broker.bootstrap_servers
    topic, _ = point_at_broker(project, servers)
    use_registry(project, schema_registry["url"])
    with (project / "conf/kafka/globals.yml").open("a") as conf:
        conf.write(
            # The reader pinned to version 1: version 2's trips projected
            # onto it (their new field dropped), as an older consumer reads.
            "    version: 1\n"
            f"    key_subject: {topic}-key\n"
            "  messages_avro:\n    schema_registry_url: ${kafka.schema_registry_url}\n"
        )
    kafka = yaml.safe_load((project / "conf/kafka/globals.yml").read_text())["kafka"]
    outputs = [kafka["checked_trips_topic"], kafka["rejected_trips_topic"]]

    registry = registry_module.SchemaRegistry(schema_registry["url"])
    key_frame = registry_module.avro_framer(registry, f"{topic}-key", '"string"')
    lines = {}  # input offset: the JSON line a good frame was made from
    values, keys = [], []
    for version, index in ((1, 0), (2, 1)):
        frame = registry_module.avro_framer(
            registry, f"{topic}-value", trips.trip_avro_schema(version)
        )
        for line in trips.trip_records(index):
            if _fits(trips, line):
                lines[len(values)] = line
                values.append(frame(trips.avro_trip(line, version)))
                keys.append(key_frame(str(json.loads(line)["PULocationID"])))
        if version == 1:
            bad = bad_frames(values[0], schema_registry["url"])
            reasons = {len(values) + n: reason for n, reason in enumerate(bad.values())}
            values += list(bad)
            keys += [keys[0]] * len(bad)
            # A good trip without a key, and one whose key is not framed.
            lines[len(values)] = lines[0]
            values.append(values[0])
            keys.append(None)
            reasons[len(values)] = (
                "key: not in Confluent's wire format: magic byte 7, 0 expected"
            )
            values.append(values[0])
            keys.append(b"\x07" + keys[0][1:])
    producer = KafkaProducer(bootstrap_servers=servers, acks="all")
    try:
        for key, value in zip(keys, values, strict=True):
            producer.send(topic, key=key, value=value, partition=0)
        producer.flush()
    finally:
        producer.close()

    log = project / "realtime.log"
    process = start_kedro(
        project_bin,
        project,
        [
            *("run", "--env", "kafka", "--pipelines", "realtime", "--params"),
            "realtime_checkpoint_interval=5 seconds,metrics_port=0",
        ],
        log,
    )
    try:
        deadline = time.monotonic() + 180
        while True:
            records = read_topics(servers, outputs)
            decoded = avro_values(registry, records)
            if {value["kafka_offset"] for _, value in decoded} >= set(
                range(len(values))
            ):
                break
            assert process.poll() is None, log.read_text()[-5000:]
            assert time.monotonic() < deadline, log.read_text()[-5000:]
            time.sleep(1)
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0, log.read_text()[-5000:]
    assert re.findall(r"met Avro schema id (\d+), (\w+)", log.read_text()) == [
        (str(UNKNOWN_ID), "which")
    ]

    # Each topic's messages in the schema registered under <topic>-value.
    for output in outputs:
        ids = {i for (i, _), r in zip(decoded, records) if r.topic == output}
        assert ids == {registry.version(f"{output}-value").id}, output
    boroughs = zone_boroughs(project / "data/01_raw/taxi_zone_lookup.csv")
    # Every message was in the topic before the query started, so its first
    # micro-batch met the unknown id before any checkpoint: what it had
    # written, every message before that one, the replanned query wrote
    # again (Kafka's sink is at least once). Each copy the same.
    unknown = next(o for o, reason in reasons.items() if "unknown" in reason)
    copies = Counter(value["kafka_offset"] for _, value in decoded)
    assert copies == {o: 2 if o < unknown else 1 for o in range(len(values))}
    by_offset = {}
    for record, (_, message) in zip(records, decoded):
        by_offset.setdefault(message["kafka_offset"], []).append(message)
    assert all(m.count(m[0]) == len(m) for m in by_offset.values())
    for record, (_, message) in zip(records, decoded):
        offset = message["kafka_offset"]
        assert (message["kafka_topic"], message["kafka_partition"]) == (topic, 0)
        if offset in reasons:
            assert record.topic == outputs[1], offset
            assert_rejected_frame(message, reasons[offset], values[offset], lines[0])
            continue
        trip, reason = check(decode(lines[offset].encode()), set(boroughs))
        assert record.topic == outputs[reason is not None], offset
        assert message["rejection_reason"] == reason
        if trip is not None:
            assert_same_trip(message, trip, boroughs)


def assert_rejected_frame(message: dict, reason: str, value, good_line: str) -> None:
    """A bad frame's message: its reason, and its bytes as base64; a bad key's,
    the record its good value decoded to."""
    assert message["rejection_reason"] == reason
    if reason.startswith("key: "):
        record = json.loads(message["raw_payload"])
        assert record["PULocationID"] == json.loads(good_line)["PULocationID"]
    else:
        assert message["raw_payload"] == (
            None if value is None else base64.b64encode(value).decode()
        )
