"""Real-Time Mode: the `realtime` pipeline, Kafka to Kafka, with the real broker.

Every message of the trips topic, bad ones among them, comes out once on the
topic its verdict names, with the reasons and the origin the reference gives
it; a SIGKILL mid-stream loses nothing, and what the restart writes again is
exactly what the killed run wrote after its last checkpoint; the dedupe
pipeline, reading those topics back, keeps each trip once.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import threading
import time
from collections import Counter

import pandas as pd
import pytest
import yaml
from kafka.admin import KafkaAdminClient, NewTopic
from support.checkpoints import batch_ids, committed_files
from support.common import (
    EVENT_HUBS_PASSWORD,
    EVENT_HUBS_USER,
    SHIPPED_JIT,
    free_port,
    kedro_run,
    run,
    streams,
)
from support.kafka import (
    assert_each_message,
    bad_messages,
    point_at_broker,
    read_topics,
    send_to_one_partition,
    wait_for_offsets,
)
from support.metrics import progress_records
from support.processes import crash, start_kedro
from support.project import USER_FOLDER, bundled_lines
from support.security import (
    assert_serves_no_secret,
    files_holding,
    secure_kafka,
    user_caches,
)

# Spark's shortest: a checkpoint, and a progress record, every 5 s.
RUN = [
    *("run", "--env", "kafka", "--pipelines", "realtime"),
    *("--params", "realtime_checkpoint_interval=5 seconds"),
]


@pytest.fixture(autouse=True)
def shipped_jit(monkeypatch):
    """This module's runs keep conf/kafka/spark.yml's JIT as shipped (both
    compilers, Spark's generated code on C1): the other tests' runs take
    the quick compiler only (support.common.SHORT_RUN_JIT)."""
    for name, value in SHIPPED_JIT.items():
        monkeypatch.setenv(name, value)


def kill_while_sending(
    project_bin, project, servers, *, trips_topic, outputs, sent, second
) -> tuple[Counter, int]:
    """Runs the realtime pipeline until the ``sent`` messages are out and a
    batch has ended (a checkpoint to go back to), then SIGKILLs it while the
    ``second`` wave arrives. Returns how often each input offset was written,
    and the offset the checkpoint's last batch ended at."""
    log = project / "run-1.log"
    process = start_kedro(project_bin, project, RUN, log)
    commits = project / "data/kafka/checkpoints/trip_messages/commits"
    sender = threading.Thread(
        target=lambda: [
            send_to_one_partition(servers, trips_topic, second[i : i + 20])
            or time.sleep(0.05)
            for i in range(0, len(second), 20)
        ]
    )
    try:
        wait_for_offsets(servers, outputs, sent, process=process, log=log)
        until(lambda: batch_ids(commits), log)
        # And logged: the progress log records a batch a moment after it
        # commits, so a SIGKILL in that moment leaves it out of the totals.
        until(lambda: rows_in(project) > 0, log)
        sender.start()
        # Killed at a point of the second wave chosen anew each time (printed).
        pause = random.uniform(0.2, 1.5)
        print(f"SIGKILL {pause:.2f} s into the second wave")
        time.sleep(pause)
    finally:
        crash(process)
        process.wait(timeout=60)
    sender.join()
    written = Counter(
        json.loads(r.value)["kafka_offset"] for r in read_topics(servers, outputs)
    )
    return written, checkpointed_offset(project)


def assert_dedupe_keeps_each_trip_once(project_bin, project, by_offset, trips_topic):
    """The dedupe pipeline reads the checked-trips topics, copies and all,
    and keeps each input trip once, with the message its copies share."""
    result = kedro_run(project_bin, project, "--env", "kafka", "--pipelines", "dedupe")
    table = project / "data/kafka/02_intermediate/unique_trips"
    kept = pd.concat(pd.read_parquet(path) for path in committed_files(table))
    copies = sum(len(c) for c in by_offset.values())
    assert sorted(kept.kafka_offset) == sorted(by_offset)  # each trip once
    assert set(kept.kafka_topic) == {trips_topic}
    for row in kept.itertuples():
        assert json.loads(row.message) == by_offset[row.kafka_offset][0][1]
    dedupe_batches = [
        r
        for r in progress_records(project, "data/kafka")
        if r["query"] == "unique_trips"
    ]
    assert sum(r["input_rows"] for r in dedupe_batches) == copies
    assert sum(r["late_state_rows_dropped"] for r in dedupe_batches) == 0
    assert "dedupeWithinWatermark" in result.output
    print(f"dedupe: {copies} messages, {len(kept)} trips kept")


def assert_a_batch_captured_replays_as_a_test(project_bin, project, secrets):
    """`kedro streams capture` takes the dedupe's last batch that read
    messages (Spark reads its Kafka offsets again, over TLS and SASL) into a
    test of the project, which replays it through the node as it ran."""
    read = [
        r
        for r in progress_records(project, "data/kafka")
        if r["query"] == "unique_trips" and r["input_rows"]
    ]
    batch, rows = read[-1]["batch"], read[-1]["input_rows"]
    captured = streams(
        project_bin,
        project,
        *("capture", "unique_trips", "--env", "kafka", "--batch", str(batch)),
    )
    said = " ".join(captured.stdout.split())
    assert f"checked_trip_messages: {rows} rows, as batch {batch} read them" in said
    written = sum(r["rows_written"] for r in read if r["batch"] == batch)
    assert (
        f"written: {written} rows, as the sink holds them; the replay writes "
        f"the same {written} rows"
    ) in said, captured.stdout
    incidents = project / "tests" / "incidents"
    assert files_holding([incidents], secrets) == []
    replayed = run(
        [project_bin / "python", "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        + [str(incidents / f"test_unique_trips_batch_{batch}.py")],
        cwd=project,
    )
    assert "1 passed" in replayed.stdout, replayed.output[-3000:]
    print(f"capture: batch {batch} of unique_trips, {rows} messages, {written} rows")


def until(condition, log, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, log.read_text()[-5000:]
        time.sleep(0.2)


def rows_in(project) -> int:
    """The input rows of the realtime query's batches in the progress log."""
    return sum(
        record["input_rows"]
        for record in progress_records(project, "data/kafka")
        if record["query"] == "trip_messages"
    )


def checkpointed_offset(project) -> int:
    """The end offset (partition 0) of the last batch the checkpoint recorded."""
    folder = project / "data/kafka/checkpoints/trip_messages/offsets"
    last = max(
        (p for p in folder.iterdir() if p.name.isdigit()), key=lambda p: int(p.name)
    )
    return json.loads(last.read_text().splitlines()[2]).popitem()[1]["0"]


def test_realtime_checks_each_trip_and_loses_nothing_through_sigkill(  # noqa: PLR0915, PLR0917 (fixtures; one story)
    generated_project,
    project_bin,
    broker_log_on_failure,
    project_tool,
    tmp_path,
    monkeypatch,
):
    """Real-Time Mode over SASL_SSL (PLAIN, a PKCS12 trust store), logged in
    as Azure Event Hubs has it (`$ConnectionString`, a connection string for
    a password); the test's own Kafka clients use the plain listener of the
    same broker."""
    servers = broker_log_on_failure.bootstrap_servers
    secured = secure_kafka(
        monkeypatch,
        broker_log_on_failure,
        "SASL_SSL",
        stores="PKCS12",
        login=(EVENT_HUBS_USER, EVENT_HUBS_PASSWORD),
    )
    secrets = (
        EVENT_HUBS_PASSWORD,
        (broker_log_on_failure.tls_dir / "store-password").read_text(),
    )
    project = tmp_path / USER_FOLDER / "project"
    project.parent.mkdir(parents=True)
    run(["cp", "-a", str(generated_project), str(project)], cwd=tmp_path)
    trips_topic, _ = point_at_broker(project, secured)
    kafka = yaml.safe_load((project / "conf/kafka/globals.yml").read_text())["kafka"]
    outputs = [kafka["checked_trips_topic"], kafka["rejected_trips_topic"]]

    lines = [line.encode() for line in bundled_lines(project)]
    rule_breakers = project_tool("trips").rule_breaking_trips()
    first = lines + bad_messages(json.loads(lines[0]), rule_breakers)
    second = lines  # the same records again, at new offsets
    messages = first + second
    send_to_one_partition(servers, trips_topic, first)

    # Run 1: the first wave; then the second, sent while the run is killed.
    written_before_restart, replay_from = kill_while_sending(
        project_bin,
        project,
        servers,
        trips_topic=trips_topic,
        outputs=outputs,
        sent=len(first),
        second=second,
    )

    # Run 2: resumes from the checkpoint; SIGTERM to its whole process group,
    # as systemd sends it, stops it cleanly.
    log = project / "run-2.log"
    ui_port, metrics_port = free_port(), free_port()
    ports = f",spark_ui_port={ui_port},metrics_port={metrics_port}"
    process = start_kedro(project_bin, project, [*RUN[:-1], RUN[-1] + ports], log)
    try:
        records = wait_for_offsets(
            servers, outputs, len(messages), process=process, log=log
        )
        # The progress log counts a batch when it ends (every 5 s here): the
        # batches the checkpoint holds read offsets 0 to replay_from, the
        # restart's first batch the rest. Each input row counted once.
        until(lambda: rows_in(project) >= len(messages), log)
        assert rows_in(project) == len(messages)
        # No secret in what the run serves: the Spark UI's API and pages (its
        # plans hold the Kafka options) and the metrics endpoint.
        assert_serves_no_secret(
            ui_port,
            metrics_port,
            "trip_messages",
            secrets,
        )
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        assert process.wait(timeout=60) == 0, log.read_text()[-5000:]
    assert "Started streaming query 'trip_messages'" in log.read_text() and (
        "Query trip_messages: in Real-Time Mode these totals count the batches "
        "that reached a checkpoint"
    ) in " ".join(log.read_text().split())
    # The stop interrupts the query's long-running tasks mid-interval: Spark's
    # errors about them are not shown (the line above says what they meant).
    _, stopped = re.split(
        r"Stopping\s+streaming\s+query\s+'trip_messages'", log.read_text()
    )
    assert [line for line in stopped.splitlines() if " ERROR " in line] == []

    assert files_holding([project, *user_caches()], secrets) == []
    by_offset = assert_each_message(project, records, messages, trips_topic, outputs)

    # At least once: written again is exactly what the killed run wrote after
    # the last checkpoint it recorded, and nothing else.
    twice = {o for o in written_before_restart if o >= replay_from}
    assert {o: len(copies) for o, copies in by_offset.items()} == {
        o: 2 if o in twice else 1 for o in range(len(messages))
    }
    print(f"SIGKILL: {len(twice)} messages written twice (from offset {replay_from})")

    assert_dedupe_keeps_each_trip_once(project_bin, project, by_offset, trips_topic)
    assert_a_batch_captured_replays_as_a_test(project_bin, project, secrets)

    status = streams(
        project_bin, project, "status", "--env", "kafka", "--pipelines", "realtime"
    )
    assert "trip_messages: batch" in status.stdout
    assert f"realtime_raw_trips lag {trips_topic} 0 messages" in status.stdout

    # A topic of 3 partitions on local[2]: one would never be read. Refused
    # before start, by `run` and `validate` alike (validate starts nothing).
    wide_topic = f"wide-{trips_topic}"
    admin = KafkaAdminClient(bootstrap_servers=servers)
    try:
        admin.create_topics([NewTopic(wide_topic, 3, 1)])
    finally:
        admin.close()
    globals_file = project / "conf/kafka/globals.yml"
    globals_file.write_text(
        globals_file.read_text().replace(
            f"trips_topic: {trips_topic}", f"trips_topic: {wide_topic}"
        )
    )
    validate = streams(
        project_bin,
        project,
        "validate",
        "--env",
        "kafka",
        "--pipelines",
        "realtime",
        check=False,
    )
    assert validate.returncode == 1, validate.stdout + validate.stderr
    assert (
        "its Kafka source 'realtime_raw_trips' (3) for as long as it runs, but "
        "Spark has 2 cores: 1 partition(s) would never be read"
    ) in validate.stdout + validate.stderr
