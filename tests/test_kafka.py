"""The Kafka path against a real Apache Kafka broker (KRaft), started by the
generated project's own `tools/broker.py`: no mocks anywhere."""

from __future__ import annotations

import importlib
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from reference import (
    example_settings,
    expected_outputs,
    json_landing_batches,
    zone_boroughs,
)
from support.checkpoints import committed_files, read_table
from support.common import SASL_PASSWORD, SASL_USER, free_port, kedro_run, run
from support.compare import assert_progress_log
from support.kafka import consume_all, kafka_messages, point_at_broker, read_topics
from support.metrics import (
    assert_metrics_match_progress_log,
    progress_records,
    unix_time,
)
from support.processes import start_continuous_kafka_run, wait_for
from support.project import bundled_lines
from support.security import secure_kafka


def produce(bin_dir: Path, project: Path, *args: str) -> str:
    return run(
        [bin_dir / "python", "-m", "tools", "trips", "send", *args],
        cwd=project,
    ).stdout


def test_kafka_continuous_run_two_waves_sigterm_and_restart(
    fresh_project, project_bin, broker_log_on_failure
):
    servers, metrics = broker_log_on_failure.bootstrap_servers, free_port()
    trips, _ = point_at_broker(fresh_project, servers, chunk=10_000)
    lines = bundled_lines(fresh_project)
    first_wave = sum(
        1
        for p in sorted((fresh_project / "data/01_raw/trips_landing").glob("*.json"))[
            :4
        ]
        for line in p.read_text().splitlines()
        if line.strip()
    )
    expected_all = expected_outputs(
        json_landing_batches(fresh_project / "data/01_raw/trips_landing"),
        zone_boroughs(fresh_project / "data/01_raw/taxi_zone_lookup.csv"),
        example_settings(fresh_project),
    )
    expected_first = expected_outputs(
        json_landing_batches(fresh_project / "data/01_raw/trips_landing")[:4],
        zone_boroughs(fresh_project / "data/01_raw/taxi_zone_lookup.csv"),
        example_settings(fresh_project),
    )
    bronze_dir = fresh_project / "data/kafka/02_intermediate/bronze_trips"

    def bronze_rows() -> int:
        if not (bronze_dir / "_spark_metadata").is_dir() or not any(
            p.name[0].isdigit() for p in (bronze_dir / "_spark_metadata").iterdir()
        ):
            return 0
        # The valid trips: bronze also keeps the rejected records.
        return sum(
            pd.read_parquet(path).rejection_reason.isna().sum()
            for path in committed_files(bronze_dir)
        )

    def run_continuously(until, log_name: str) -> None:
        log_path = fresh_project / log_name
        process = start_continuous_kafka_run(
            project_bin, fresh_project, log_path, params=f"metrics_port={metrics}"
        )
        try:
            until(process, log_path)
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=120) == 0, log_path.read_text()[-5000:]
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)

    def two_waves(process, log_path):
        # Wave 1 through the project's producer command, wave 2 with kafka-python.
        produce(
            project_bin, fresh_project, "--topic", trips, "--count", str(first_wave)
        )
        wait_for(
            lambda: bronze_rows() == len(expected_first.bronze),
            process,
            log_path,
            "wave 1",
        )
        producer = KafkaProducer(bootstrap_servers=servers, acks="all")
        try:
            for line in lines[first_wave:]:
                producer.send(trips, value=line.encode())
            producer.flush()
        finally:
            producer.close()
        wait_for(
            lambda: bronze_rows() == len(expected_all.bronze),
            process,
            log_path,
            "wave 2",
        )
        # While it runs, once each query has logged a batch: the Prometheus
        # endpoint serves the progress log's figures.
        queries = {"bronze_trips", "hourly_borough_summary", "quarantined_trips"}
        wait_for(
            lambda: (
                queries
                <= {
                    r["query"]
                    for r in progress_records(fresh_project, "data/kafka")
                    if unix_time(r["time"]) >= started
                }
            ),
            process,
            log_path,
            "a batch of each query",
        )
        served = assert_metrics_match_progress_log(
            fresh_project, "data/kafka", started, port=metrics
        )
        assert served == queries

    started = time.time()
    run_continuously(two_waves, "continuous-1.log")
    count = bronze_rows()

    def a_few_idle_batches(process, log_path):
        wait_for(
            lambda: "Streaming queries running" in log_path.read_text(),
            process,
            log_path,
            "start",
        )
        time.sleep(5)

    run_continuously(a_few_idle_batches, "continuous-2.log")
    assert bronze_rows() == count, "a restart must not reprocess committed offsets"
    assert_progress_log(fresh_project, "data/kafka", kafka_messages(servers, trips))


def test_broker_cli_start_status_stop_keeps_data_reset_deletes(
    fresh_project, project_bin, broker_tool
):
    """The documented commands: start returns once the broker answers, a line
    per listener saying its port and what it serves, the PLAINTEXT one never
    on a TLS or SASL listener's port, a password only from the environment;
    stop keeps the data folder, so topics survive a restart; reset deletes it."""
    # The default folder, relative to the project, as the README runs it.
    data_dir = fresh_project / "data/kafka-broker"
    # `kedro streams broker` without Kedro's CLI, whose logging setup line
    # would come first on stdout: what a script reads.
    cli = [project_bin / "python", "-m", "kedro_streaming.devtools", "broker"]

    def start(*options: str, env=None) -> tuple[dict, list[str]]:
        started = run([*cli, "start", *options], cwd=fresh_project, env=env)
        state = json.loads((data_dir / "broker.json").read_text())
        assert started.stdout.strip() == state["bootstrap_servers"]
        return state, started.stderr.splitlines()

    def refused(*options: str, env=None) -> str:
        """What `start` says, exiting 1 before it starts anything."""
        result = run(
            [*cli, "start", *options],
            cwd=fresh_project,
            env=env,
            check=False,
            stdin=subprocess.DEVNULL,  # no terminal to ask a password on
        )
        assert result.returncode == 1 and result.stdout == "", result.output
        return result.stderr

    # A password is never taken from the command line (`ps` shows it).
    assert refused("--sasl-user", f"{SASL_USER}:{SASL_PASSWORD}") == (
        f"error: --sasl-user {SASL_USER}:...: a password on the command line is "
        "shown to every user of this machine (ps) and kept in the shell's "
        f"history. Give --sasl-user {SASL_USER} and export KAFKA_SASL_PASSWORD "
        "(or type it when asked, on a terminal)\n"
    )
    assert refused("--sasl-user", SASL_USER, env={"KAFKA_SASL_PASSWORD": None}) == (
        f"error: --sasl-user {SASL_USER}: export KAFKA_SASL_PASSWORD, its "
        "password (on a terminal, the command asks for it)\n"
    )
    ssl, mtls, sasl_ssl = broker_tool.free_ports(3)
    tls = ["--tls", "--tls-ports", str(ssl), str(mtls), str(sasl_ssl)]
    assert refused("--port", str(sasl_ssl), *tls) == (
        f"error: --port {sasl_ssl} is the SASL_SSL listener's too: give another "
        "(0: any free one)\n"
    )

    (first, _), second = start("--port", "0"), None
    try:
        status = run([*cli, "status"], cwd=fresh_project).stdout
        assert json.loads(status)["running"] and json.loads(status)["reachable"]
        producer = KafkaProducer(bootstrap_servers=first["bootstrap_servers"])
        try:
            producer.send("smoke", b"hello").get(timeout=30)
        finally:
            producer.close()
        run([*cli, "stop"], cwd=fresh_project)
        assert not broker_tool.pid_alive(first["pid"])
        assert (data_dir / "kraft-logs").is_dir()

        # Started again as docs/kafka-security.md has it: TLS and SASL
        # listeners, the project pointed at the SASL_SSL one. The PLAINTEXT
        # listener takes another port (Kafka's usual 9092 is held, see
        # conftest.py), and each listener says what it serves.
        globals_yml = fresh_project / "conf/kafka/globals.yml"
        globals_yml.write_text(
            globals_yml.read_text().replace("localhost:9092", f"localhost:{sasl_ssl}")
        )
        second, said = start(
            *tls, "--sasl-user", SASL_USER, env={"KAFKA_SASL_PASSWORD": SASL_PASSWORD}
        )
        plain, sasl = second["bootstrap_servers"], second["sasl_bootstrap_servers"]
        assert (
            f"kafka.bootstrap_servers of conf/kafka (localhost:{sasl_ssl}) is the "
            "SASL_SSL listener's: the PLAINTEXT listener takes a free port"
        ) in said
        logins = "PLAIN and SCRAM-SHA-512 logins"
        assert [line for line in said if " listener: " in line] == [
            f"PLAINTEXT listener: {plain} (no TLS, no login)",
            f"SASL_PLAINTEXT listener: {sasl} (security_protocol SASL_PLAINTEXT: "
            f"{logins})",
            f"SSL listener: localhost:{ssl} (security_protocol SSL: the broker's "
            "certificate)",
            f"MTLS listener: localhost:{mtls} (security_protocol SSL, with a "
            "client certificate)",
            f"SASL_SSL listener: localhost:{sasl_ssl} (security_protocol SASL_SSL: "
            f"{logins})",
        ]
        assert second["cluster_id"] == first["cluster_id"]
        assert [
            r.value for r in consume_all(second["bootstrap_servers"], "smoke", 1)
        ] == [b"hello"]
        run([*cli, "reset"], cwd=fresh_project)
        assert not broker_tool.pid_alive(second["pid"])
        assert not data_dir.exists()
    finally:
        for state in (first, second):
            if state and broker_tool.pid_alive(state["pid"]):
                broker_tool.terminate(state["pid"], grace=5)


def test_broker_keeps_acknowledged_messages_through_sigkill(broker_tool, tmp_path):
    """As a compose volume would: every message acknowledged with acks=all is
    there after the broker process is killed and started on the same folder."""
    data_dir, topic, count = tmp_path / "kafka-broker", "kept", 5000
    first = broker_tool.LocalKafka(data_dir=data_dir).start(timeout=180)
    second = None
    try:
        producer = KafkaProducer(
            bootstrap_servers=first.bootstrap_servers, acks="all", linger_ms=5
        )
        try:
            futures = [producer.send(topic, str(i).encode()) for i in range(count)]
            producer.flush()
            acknowledged = [future.get(timeout=30) for future in futures]
        finally:
            producer.close()
        assert len(acknowledged) == count

        os.kill(first.pid, signal.SIGKILL)
        first.stop()  # reaps the killed process; the folder stays
        assert (data_dir / "kraft-logs").is_dir()

        second = broker_tool.LocalKafka(data_dir=data_dir, port=first.port)
        second.start(timeout=180)
        assert second.cluster_id == first.cluster_id
        values = [r.value for r in consume_all(second.bootstrap_servers, topic, count)]
        assert sorted(values, key=int) == [str(i).encode() for i in range(count)]
        # No more either: the end offsets count exactly the acknowledged ones.
        consumer = KafkaConsumer(bootstrap_servers=second.bootstrap_servers)
        try:
            partitions = [
                TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic)
            ]
            assert sum(consumer.end_offsets(partitions).values()) == count
        finally:
            consumer.close()
    finally:
        first.stop(grace=5)
        if second is not None:
            second.stop(grace=5)


def send_acknowledged(servers: str, topic: str, values: list[bytes]) -> None:
    """Sends with acks=all and returns once the broker acknowledged every one."""
    producer = KafkaProducer(bootstrap_servers=servers, acks="all")
    try:
        futures = [producer.send(topic, value) for value in values]
        producer.flush()
        for future in futures:
            future.get(timeout=30)
    finally:
        producer.close()


def committed_rows(table: Path) -> int:
    """Rows of a file sink's committed batches; 0 before its first commit."""
    log = table / "_spark_metadata"
    if not log.is_dir() or not any(p.name[0].isdigit() for p in log.iterdir()):
        return 0
    return sum(len(pd.read_parquet(path)) for path in committed_files(table))


def wait_until(condition, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(1)


def test_continuous_run_through_a_broker_sigkill_loses_nothing(
    fresh_project, project_bin, broker_tool, tmp_path
):
    """The broker of a continuous run is killed with SIGKILL and started again
    on its data folder: the run rides through the outage, or stops naming the
    broker; either way a rerun leaves every acknowledged message once in bronze."""
    data_dir = tmp_path / "kafka-broker"
    first = broker_tool.LocalKafka(data_dir=data_dir).start(timeout=180)
    second, process = None, None
    servers = first.bootstrap_servers
    trips, _ = point_at_broker(fresh_project, servers, chunk=10_000)
    lines = [line.encode() for line in bundled_lines(fresh_project)]
    half = len(lines) // 2
    bronze_dir = fresh_project / "data/kafka/02_intermediate/bronze_trips"

    def bronze_rows() -> int:
        return committed_rows(bronze_dir)

    log_path = fresh_project / "outage.log"
    try:
        admin = KafkaAdminClient(bootstrap_servers=servers)
        admin.create_topics([NewTopic(trips, 1, 1)])
        admin.close()
        send_acknowledged(servers, trips, lines[:half])
        process = start_continuous_kafka_run(
            project_bin, fresh_project, log_path, "--pipelines", "ingest"
        )
        wait_until(lambda: bronze_rows() == half or process.poll() is not None, 180)
        assert bronze_rows() == half, log_path.read_text()[-5000:]

        os.kill(first.pid, signal.SIGKILL)
        first.stop()  # reaps the killed process; the folder stays
        time.sleep(5)  # an outage of a few triggers
        second = broker_tool.LocalKafka(data_dir=data_dir, port=first.port)
        second.start(timeout=180)
        send_acknowledged(servers, trips, lines[half:])
        wait_until(
            lambda: bronze_rows() == len(lines) or process.poll() is not None, 180
        )
        if process.poll() is None:
            outcome = "rode through the outage"
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=120) == 0, log_path.read_text()[-5000:]
        else:
            outcome = "stopped"
            output = log_path.read_text()
            assert process.returncode != 0
            assert f":{first.port}" in output, output[-5000:]
        print(f"the continuous run {outcome}")

        # A bounded rerun takes what is left, from the committed offsets.
        kedro_run(project_bin, fresh_project, "--env", "kafka", "--pipelines", "ingest")
        bronze = read_table(
            fresh_project / "data/kafka", "02_intermediate/bronze_trips"
        )
        assert sorted(bronze.kafka_offset) == list(range(len(lines)))
    finally:
        if process is not None and process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        first.stop(grace=5)
        if second is not None:
            second.stop(grace=5)


def test_wrong_connector_version_stops_the_run_before_any_stream(
    fresh_project, project_bin
):
    wrong = fresh_project / "conf/wrong_connector"
    wrong.mkdir()
    (wrong / "spark.yml").write_text(
        "spark.jars.packages: org.apache.spark:spark-sql-kafka-0-10_2.12:3.5.1\n"
    )
    result = run(
        [project_bin / "kedro", "run", "--env", "wrong_connector"],
        cwd=fresh_project,
        check=False,
        timeout=300,
    )
    output = result.output
    assert result.returncode != 0
    assert "spark-sql-kafka-0-10_2.12:3.5.1" in output and "Scala 2.13" in output
    assert "org.apache.spark:spark-sql-kafka-0-10_2.13:" in output
    assert "Started streaming query" not in output
    assert not (fresh_project / "data/checkpoints/bronze_trips").exists()


# A message over Kafka's 1 MiB defaults, between two small ones.
BIG_PAD = 2_000_000


@pytest.mark.parametrize(
    ("max_message_bytes", "topic_exists", "refused_by"),
    [
        pytest.param(None, False, "producer", id="default-limit"),
        pytest.param(3_000_000, True, "brokers", id="raised-on-an-existing-topic"),
        pytest.param(3_000_000, False, None, id="raised-on-a-new-topic"),
    ],
)
def test_send_names_each_message_not_sent_and_watch_prints_only_records(  # noqa: PLR0913, PLR0917 (fixtures)
    max_message_bytes,
    topic_exists,
    refused_by,
    fresh_project,
    project_bin,
    broker,
    monkeypatch,
):
    """`kedro streams send` over SASL_SSL with the pipelines' credentials
    entry: a line too large is named with its line number and the limit
    that refused it, the lines around it arrive, and the command exits 1;
    `--max-message-bytes` raises the producer's limit (and a new topic's).
    `watch` prints the messages, the large one too, on stdout, and nothing
    else."""
    servers = secure_kafka(monkeypatch, broker, "SASL_SSL", mechanism="SCRAM-SHA-512")
    topic, _ = point_at_broker(fresh_project, servers)
    if topic_exists:
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
        admin.create_topics([NewTopic(topic, 1, replication_factor=1)])
        admin.close()
    small = [json.dumps({"device": "d1", "n": 1}), json.dumps({"device": "d2", "n": 2})]
    big = json.dumps({"device": "d3", "pad": "x" * BIG_PAD})
    # A blank line is no message, but counts in the line numbers.
    (fresh_project / "messages.jsonl").write_text(f"{small[0]}\n\n{big}\n{small[1]}\n")
    options = (
        ["--max-message-bytes", str(max_message_bytes)] if max_message_bytes else []
    )
    kedro = project_bin / "kedro"
    sent = run(
        [
            *(kedro, "streams", "send", "--env", "kafka", "--topic", topic),
            *("--key", "device", "--partitions", "1", *options, "messages.jsonl"),
        ],
        cwd=fresh_project,
        check=False,
    )
    size = len(big) + len("d3")  # value and key
    not_sent = {
        "producer": f"line 3: not sent: {size} bytes (key and value), too large "
        "for the producer's max.request.size (1048576): raise it with "
        "--max-message-bytes",
        "brokers": f"line 3: not sent: {size} bytes (key and value), too large "
        f"for topic {topic} (its max.message.bytes, 1048588): the brokers "
        "refused it. Raise the topic's max.message.bytes (kafka-configs.sh "
        f"--alter --entity-type topics --entity-name {topic} --add-config "
        "max.message.bytes=N); --max-message-bytes raises the producer's limit, "
        "and that of a topic it creates, only",
    }
    reported = [line for line in sent.stderr.splitlines() if line.startswith("line ")]
    assert reported == ([not_sent[refused_by]] if refused_by else []), sent.stderr
    arrived = [small[0], small[1]] if refused_by else [small[0], big, small[1]]
    assert re.fullmatch(
        f"Sent {len(arrived)} messages to {topic} at {servers} in [0-9.]+ s, "
        f"{1 if refused_by else 0} not sent",
        sent.stdout.splitlines()[-1],
    ), sent.stdout
    assert sent.returncode == (1 if refused_by else 0), sent.output

    assert SASL_PASSWORD not in sent.output
    if refused_by:  # read here: watch's own case is the next
        values = [
            m.value.decode() for m in read_topics(broker.bootstrap_servers, [topic])
        ]
        assert values == arrived
        return
    watched = run(
        [kedro, "streams", "watch", "--env", "kafka", "--topic", topic]
        + ["--idle-seconds", "5"],
        cwd=fresh_project,
    )
    # stdout holds the records only: no banner, no log line.
    assert watched.stdout.splitlines() == [
        f"{json.loads(line)['device']}\t{line}" for line in arrived
    ]
    assert watched.stderr.splitlines()[-1] == f"{len(arrived)} messages on {topic}"
    assert SASL_PASSWORD not in watched.output


AVRO_READING = {
    "type": "record",
    "name": "Reading",
    "fields": [
        {"name": "device", "type": "string"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "temperature_c", "type": ["null", "double"], "default": None},
    ],
}


def test_watch_decodes_avro_and_the_helper_uses_the_pipelines_credentials(  # noqa: PLR0914, PLR0917 (fixtures; one story)
    fresh_project, project_bin, plugin_tool, broker, schema_registry, monkeypatch
):
    """Over SASL_SSL with the pipelines' credentials entry: the docs'
    `kafka_producer` / `kafka_consumer` example runs as written; `kedro
    streams watch` on an Avro topic prints each record decoded through the
    registry as one JSON line, and names each message that does not decode
    on stderr, with its offset and reason."""
    plugin_tool("kafka")  # the plugin's source on the path
    registry_module = importlib.import_module("kedro_streaming")
    servers = secure_kafka(monkeypatch, broker, "SASL_SSL", mechanism="SCRAM-SHA-512")
    topic, _ = point_at_broker(fresh_project, servers)
    url = schema_registry["url"]
    with (fresh_project / "conf/kafka/globals.yml").open("a") as globals_file:
        globals_file.write(f"  schema_registry_url: {url}\n")

    docs = (fresh_project / "docs/kafka.md").read_text()
    example = docs[docs.index("```python\nfrom kedro_streaming import kafka_") :]
    example = example.removeprefix("```python\n").split("```")[0]
    readings = f"readings-{topic}"
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    admin.create_topics([NewTopic(name, 1, 1) for name in (readings, topic)])
    admin.close()
    shown = run(
        [project_bin / "python", "-c", example.replace('"readings"', f'"{readings}"')],
        cwd=fresh_project,
    )
    assert shown.stdout == '0 d1 {"device": "d1", "temperature_c": 21.5}\n'

    registry = registry_module.SchemaRegistry(url)
    frame = registry_module.avro_framer(
        registry, f"{topic}-value", json.dumps(AVRO_READING)
    )
    frame_key = registry_module.avro_framer(registry, f"{topic}-key", '"string"')
    first = {"device": "d1", "at": 1767225600000, "temperature_c": 21.5}
    second = {"device": "d2", "at": 1767225660000, "temperature_c": None}
    unknown_id = b"\x00" + (987_654).to_bytes(4, "big") + b"\x02"
    messages = [
        (b"d1", frame(first)),
        (frame_key("d2"), frame(second)),
        (b"d3", b'{"device": "d3"}'),  # JSON, not Avro
        (None, unknown_id),
        (b"d4", None),  # a tombstone
        (b"d5", b"\x00\x01"),
        (b"d6", frame(first)[:5] + b"\xff"),  # a string longer than the rest
    ]
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers, acks="all")
    for key, value in messages:
        producer.send(topic, key=key, value=value)
    producer.flush()
    producer.close()
    timestamps = [m.timestamp for m in read_topics(broker.bootstrap_servers, [topic])]

    watched = run(
        [project_bin / "kedro", "streams", "watch", "--env", "kafka"]
        + ["--topic", topic, "--idle-seconds", "5"],
        cwd=fresh_project,
        check=False,
    )
    assert watched.returncode == 1, watched.output

    def line(offset: int, key, value) -> dict:
        return {
            "topic": topic,
            "partition": 0,
            "offset": offset,
            "timestamp": timestamps[offset],
            "key": key,
            "value": value,
        }

    assert [json.loads(text) for text in watched.stdout.splitlines()] == [
        line(0, "d1", {**first, "at": "2026-01-01T00:00:00+00:00"}),
        line(1, "d2", {**second, "at": "2026-01-01T00:01:00+00:00"}),
        line(4, "d4", None),
    ]
    schema_id = int.from_bytes(frame(first)[1:5], "big")
    assert watched.stderr.splitlines()[-5:] == [
        f"not decoded: {topic} partition 0 offset {offset}: value: {reason}"
        for offset, reason in [
            (2, "not in Confluent's wire format: magic byte 123, 0 expected"),
            (3, f"unknown schema id 987654: the schema registry at {url} has none"),
            (5, "truncated frame: 2 bytes, Confluent's wire format has at least 5"),
            (6, f"does not decode with its writer schema (id {schema_id})"),
        ]
    ] + [f"7 messages on {topic}, 4 not decoded"]
    assert SASL_PASSWORD not in shown.output + watched.output
