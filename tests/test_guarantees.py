"""When things go wrong: crashes, bad input, bad configuration, secrets.

Real Spark, the real local broker (KRaft, SASL/PLAIN listener included) and
real files; every outcome is compared with the independent computation in
`reference.py`, record by record.
"""

from __future__ import annotations

import json
import os
import random
import re
import time
from collections import Counter
from pathlib import Path

from reference import (
    check,
    decode,
    evaluate,
    example_settings,
    expected_outputs,
    json_landing_batches,
    message_batches,
    text_lines,
    zone_boroughs,
)
from support.checkpoints import (
    DELTA_TABLES,
    assert_one_commit_per_batch,
    batch_ids,
    delta_commits,
    read_table,
    replay,
)
from support.common import (
    AS_SHIPPED,
    BOUNDED,
    CHUNK,
    SASL_PASSWORD,
    SASL_USER,
    free_port,
    kedro_run,
    run,
    streams,
)
from support.compare import assert_matches_reference, assert_progress_log, split_bronze
from support.kafka import (
    bad_messages,
    consume_all,
    payload,
    point_at_broker,
    send_to_one_partition,
)
from support.processes import run_until_then_kill
from support.project import bundled_lines, combine_environments
from support.security import files_holding, secure_kafka, user_caches

DELTA_KAFKA_PIPELINES = "ingest,aggregate,live,publish"


# `kedro run`, in a process that kills itself (SIGKILL) right after the live
# summary's MERGE of micro-batch 1 commits, before Spark records the batch as
# done: the restart must replay the batch without applying it twice.
KILLED_AFTER_MERGE = """
import os, signal, sys
from kedro.framework.cli import main
from kedro_streaming._connectors import delta

def upsert_batches(path, keys, checkpoint):
    upsert = real_upsert_batches(path, keys, checkpoint)
    def upsert_then_die(batch, batch_id):
        upsert(batch, batch_id)
        if batch_id == 1:
            os.kill(os.getpid(), signal.SIGKILL)
    return upsert_then_die

real_upsert_batches, delta.upsert_batches = delta.upsert_batches, upsert_batches
sys.argv[0] = "kedro"
main()
"""


def batches_and_live_commits(tables: Path) -> str:
    """Each query's batches planned and done, and the live table's commits:
    what to read when a kill point was not reached."""
    queries = {
        folder.name: (
            sorted(batch_ids(folder / "offsets")),
            sorted(batch_ids(folder / "commits")),
        )
        for folder in sorted((tables / "checkpoints").glob("*"))
    }
    live = tables / DELTA_TABLES["live_borough_summary"]
    commits = delta_commits(live) if (live / "_delta_log").is_dir() else []
    return f"batches (planned, done): {queries}\nlive table: {commits}"


def assert_outputs_after_crash(project: Path, messages: list, trips_topic: str):
    """Every table and every progress record of the Kafka-to-Delta run, after
    its crashes and rerun, as the reference computes them.

    The summaries and the progress log follow each query's own micro-batches,
    read from its checkpoint: after a restart they need not be the
    uninterrupted run's (a batch that only moves the watermark may run in
    between, or be skipped), so the trips late for each query differ too.
    """
    expected = expected_outputs(
        message_batches(messages, 2 * CHUNK),
        zone_boroughs(project / "data/01_raw/taxi_zone_lookup.csv"),
        example_settings(project),
    )
    by_origin = {(trips_topic, 0, offset): m for offset, m in enumerate(messages)}
    summary = replay(project, "data/delta", "hourly_borough_summary", by_origin)
    expected.summary = summary.written
    expected.live = replay(
        project, "data/delta", "live_borough_summary", by_origin, live=True
    ).live
    assert_matches_reference(project, expected, "data/delta", live=True)
    assert_progress_log(project, "data/delta", by_origin)


def test_kafka_to_delta_bad_messages_and_sigkill_at_three_points(  # noqa: PLR0917 (fixtures)
    generated_project,
    project_bin,
    broker_log_on_failure,
    project_tool,
    tmp_path,
    monkeypatch,
):
    """Kafka in, Delta tables out (the live summary too), bad messages in the
    stream, three crashes (during an ingest batch, between the pipelines,
    after a MERGE but before its batch was recorded), one rerun: every message
    lands exactly once, in bronze or in quarantine with its reason and offset,
    and every micro-batch is one commit of its table; then `status` (Kafka
    lag) and `reset` of the Kafka sink. The project's clients (Spark, the
    checks, `status`) go over TLS with a JKS trust store; the test's own, to
    the plain listener of the same broker."""
    servers = broker_log_on_failure.bootstrap_servers
    secured = secure_kafka(monkeypatch, broker_log_on_failure, "SSL", stores="JKS")
    project = tmp_path / "project"
    run(["cp", "-a", str(generated_project), str(project)], cwd=tmp_path)
    # Larger micro-batches than elsewhere: fewer Delta commits, a faster test.
    trips_topic, summary_topic = point_at_broker(project, secured, 2 * CHUNK)
    combine_environments(project, "delta_kafka", "kafka", "delta")

    lines = bundled_lines(project)
    bad = bad_messages(
        json.loads(lines[0]), project_tool("trips").rule_breaking_trips()
    )
    messages: list[bytes | None] = [line.encode() for line in lines]
    # Spread over the stream, every batch but the first.
    for number, message in enumerate(bad):
        messages.insert(70 + number * 9, message)
    send_to_one_partition(servers, trips_topic, messages)

    tables = project / "data/delta"
    ingest = tables / "checkpoints/bronze_trips"

    def mid_ingest_batch() -> bool:
        """A later ingest batch began (its offsets are written), not committed."""
        pending = batch_ids(ingest / "offsets") - batch_ids(ingest / "commits")
        return any(batch >= 2 for batch in pending)

    def merged_batch_1() -> bool:
        live = tables / DELTA_TABLES["live_borough_summary"]
        return (live / "_delta_log").is_dir() and any(
            txn[1] == 1 for commit in delta_commits(live) for txn in commit["txn"]
        )

    run_args = ["--env", "delta_kafka", "--pipelines", DELTA_KAFKA_PIPELINES]
    for number, (marker, command) in enumerate(
        [
            (mid_ingest_batch, None),
            # Ingest has finished; the aggregate nodes load its table next.
            ("Loading data from bronze_trips", None),
            (merged_batch_1, [project_bin / "python", "-c", KILLED_AFTER_MERGE]),
        ]
    ):
        log = project / f"killed-{number}.log"
        run_until_then_kill(
            *(project_bin, project, marker, log, *run_args),
            command=command,
            state=lambda: batches_and_live_commits(tables),
        )
        if number == 1:
            assert "Started streaming query 'hourly_borough_summary'" not in (
                log.read_text()
            )
    live_checkpoint = tables / "checkpoints/live_borough_summary"
    assert 1 not in batch_ids(live_checkpoint / "commits")  # to be replayed
    kedro_run(project_bin, project, *run_args)
    assert_one_commit_per_batch(project)
    validated = streams(project_bin, project, "validate", *run_args).stdout
    assert "query bronze_trips: ok" in validated

    assert_outputs_after_crash(project, messages, trips_topic)
    boroughs = zone_boroughs(project / "data/01_raw/taxi_zone_lookup.csv")

    # Valid + quarantined = input, offset by offset, each with its payload.
    bronze, quarantined = split_bronze(
        read_table(tables, "02_intermediate/bronze_trips")
    )
    reasons = {
        offset: check(decode(message), set(boroughs))[1]
        for offset, message in enumerate(messages)
    }
    assert sorted(bronze.kafka_offset) == [
        o for o, reason in reasons.items() if reason is None
    ]
    got = {
        row.kafka_offset: (
            row.rejection_reason,
            row.raw_payload if isinstance(row.raw_payload, str) else None,
        )
        for row in quarantined.itertuples()
    }
    assert got == {
        o: (reason, payload(messages[o])) for o, reason in reasons.items() if reason
    }
    assert len(bronze) + len(quarantined) == len(messages)
    assert (
        set(quarantined.kafka_topic) == {trips_topic}
        and quarantined.kafka_timestamp.notna().all()
    )
    # Every bad message was caught, not let through by chance: quarantined, or
    # (a `warn` expectation) kept with its warning.
    for message in bad:
        assert evaluate(decode(message), set(boroughs)).caught, message[:200]
    warned = bronze[bronze.warnings.notna()]
    assert sorted(warned.kafka_offset) == [
        o
        for o, message in enumerate(messages)
        if reasons[o] is None and evaluate(decode(message), set(boroughs)).caught
    ]

    # The Kafka sink is at least once: every summary row, perhaps more than once.
    summary = read_table(tables, "08_reporting/hourly_borough_summary")
    records = consume_all(servers, summary_topic, expected=len(summary))
    published = {
        (
            r.key.decode(),
            json.loads(r.value)["window_start"][:16],
            json.loads(r.value)["trip_count"],
        )
        for r in records
    }
    stored = {
        (row.pickup_borough, row.window_start.isoformat()[:16], row.trip_count)
        for row in summary.itertuples()
    }
    assert published == stored

    assert_lag_and_kafka_sink_reset(
        project_bin,
        project,
        run_args,
        servers,
        (trips_topic, summary_topic),
        published=len(records),
    )


def assert_lag_and_kafka_sink_reset(
    project_bin: Path,
    project: Path,
    run_args: list[str],
    servers: str,
    topics: tuple[str, str],
    *,
    published: int,
) -> None:
    """`kedro streams status` shows how far ingest is behind the trips topic;
    `reset` of the Kafka sink removes its checkpoint, not the ``published``
    rows in its topic."""
    trips_topic, summary_topic = topics

    def lag() -> str:
        status = streams(project_bin, project, "status", *run_args).stdout
        return re.search(rf"raw_trips lag {trips_topic} (\d+) messages", status)[1]

    assert lag() == "0"
    send_to_one_partition(servers, trips_topic, [b"{}"] * 5)
    assert lag() == "5"

    checkpoint = project / "data/delta/checkpoints/hourly_borough_summary_messages"
    assert checkpoint.exists() and published > 0
    result = streams(
        project_bin,
        project,
        "reset",
        "hourly_borough_summary_messages",
        "--env",
        "delta_kafka",
        "--yes",
    )
    assert "Its Kafka topic is left alone" in " ".join(result.stdout.split())
    assert not checkpoint.exists()
    assert len(consume_all(servers, summary_topic, expected=published)) == published


def test_corrupt_files_sigkill_mid_batch_then_rerun(
    fresh_project, project_bin, project_tool
):
    """File mode: a file with binary garbage, a JSON array, CRLF line ends and
    blank lines, and a file cut mid-record, through a crash and a rerun."""
    landing = fresh_project / "data/01_raw/trips_landing"
    trip_records = project_tool("trips").trip_records
    more, last = trip_records(8), trip_records(9)

    garbage = bytes(b for b in random.Random(3).randbytes(400) if b not in b"\r\n")
    mixed = (
        [line.encode() for line in more[:20]]
        + [
            b"\xff" + garbage,
            b"[" + more[20].encode() + b"," + more[21].encode() + b"]",
            b"",
            b"   ",
        ]
        + [line.encode() for line in more[22:]]
    )
    (landing / "trips-0100.json").write_bytes(
        b"\r\n".join(mixed[:30]) + b"\n" + b"\n".join(mixed[30:]) + b"\n"
    )
    whole = "\n".join(last).encode()
    # Cut mid-record.
    (landing / "trips-0101.json").write_bytes(whole[: int(len(whole) * 0.6)])
    for offset, name in enumerate(["trips-0100.json", "trips-0101.json"], start=1):
        stamp = time.time() + offset
        os.utime(landing / name, (stamp, stamp))

    checkpoint = fresh_project / "data/checkpoints/bronze_trips"

    def mid_batch() -> bool:
        """A batch began (its offsets are written) and did not commit yet."""
        pending = batch_ids(checkpoint / "offsets") - batch_ids(checkpoint / "commits")
        return bool(pending)

    # One crash here (the Kafka-to-Delta test has the others): inside the first
    # batch, which leaves it uncommitted.
    run_until_then_kill(
        project_bin, fresh_project, mid_batch, fresh_project / "killed.log"
    )
    # `kedro streams status` tells what the checkpoints say.
    status = streams(project_bin, fresh_project, "status").stdout
    assert "bronze_trips: no batch committed yet · uncommitted batch 0" in status
    for sink in ("bronze_trips", "hourly_borough_summary"):
        line = re.search(rf"^{sink}: .*$", status, re.MULTILINE)[0]
        assert "not running" in line, line
    kedro_run(project_bin, fresh_project)
    assert "uncommitted" not in streams(project_bin, fresh_project, "status").stdout

    zones = fresh_project / "data/01_raw/taxi_zone_lookup.csv"
    settings = example_settings(fresh_project)
    expected = expected_outputs(
        json_landing_batches(landing), zone_boroughs(zones), settings
    )
    assert_matches_reference(fresh_project, expected)
    assert_progress_log(fresh_project)

    # Each rejection traces back to its file.
    _, quarantined = split_bronze(
        read_table(fresh_project / "data", "02_intermediate/bronze_trips")
    )
    got = Counter(
        (Path(row.source_file).name, row.rejection_reason)
        for row in quarantined.itertuples()
    )
    want = Counter(
        (path.name, reason)
        for path in landing.glob("*.json")
        for line in text_lines(path.read_bytes())
        if (reason := check(decode(line), set(zone_boroughs(zones)))[1])
    )
    assert got == want
    for reason in (
        "not UTF-8 text (raw_payload is base64)",
        "not a valid record",
        "empty record",
    ):
        assert want[("trips-0100.json", reason)] > 0, reason
    assert want[("trips-0101.json", "not a valid record")] == 1


def test_sasl_over_tls_works_fails_clearly_and_is_never_printed(  # noqa: PLR0914
    generated_project, project_bin, broker_log_on_failure, tmp_path, monkeypatch
):
    """SCRAM-SHA-512 over TLS, a password JAAS would misread unescaped: the
    producer, a run, `status` and `kedro catalog` work; a wrong password fails
    before any query starts, naming the cause (the other causes:
    tests/test_security.py), and `status` exits 1 at once saying why; no
    secret is printed or written."""
    broker = broker_log_on_failure
    servers = secure_kafka(monkeypatch, broker, "SASL_SSL", mechanism="SCRAM-SHA-512")
    store_password = (broker.tls_dir / "store-password").read_text()
    project = tmp_path / "sasl"
    run(["cp", "-a", str(generated_project), str(project)], cwd=tmp_path)
    trips_topic, _ = point_at_broker(project, servers, len(bundled_lines(project)))

    # The producer takes its password from the environment, never from the command line.
    produced = run(
        [
            *(project_bin / "python", "-m", "tools", "trips", "send"),
            *("--files", "3", "--partitions", "1", "--topic", trips_topic),
        ],
        cwd=project,
    )
    sent = int(re.search(r"Sent (\d+) messages", produced.stdout)[1])
    assert sent == 3 * 60 + 1  # three example files, one with a truncated record

    # The right password, through conf/kafka/credentials.yml: both pipelines.
    right = kedro_run(project_bin, project, "--env", "kafka", params=AS_SHIPPED)
    # What the topic holds, read back by the test's own client (plain listener).
    messages = [
        record.value
        for record in consume_all(broker.bootstrap_servers, trips_topic, sent)
    ]
    expected = expected_outputs(
        message_batches(messages, len(messages)),
        zone_boroughs(project / "data/01_raw/taxi_zone_lookup.csv"),
        example_settings(project),
    )
    assert_matches_reference(project, expected, "data/kafka")
    status = streams(project_bin, project, "status", "--env", "kafka")
    assert f"raw_trips lag {trips_topic} 0 messages" in status.stdout
    validated = streams(project_bin, project, "validate", "--env", "kafka")
    assert "query bronze_trips: ok" in validated.stdout

    shown = [
        run([project_bin / "kedro", "catalog", command, "--env", "kafka"], cwd=project)
        for command in ("describe-datasets", "resolve-patterns")
    ]
    assert "raw_trips" in shown[-1].output and "credentials" in shown[-1].output

    # Each mistake: one short message naming the cause, no Java stack, no query.
    wrong_password = f"wrong-{SASL_PASSWORD[::-1]}"
    mistakes = {
        "a wrong password": (
            {"KAFKA_SASL_PASSWORD": wrong_password},
            f"the Kafka broker at {servers} refused the SCRAM-SHA-512 login of "
            f"user '{SASL_USER}': check the password",
        ),
    }
    failed = []
    for variables, message in mistakes.values():
        with monkeypatch.context() as patch:
            for name, value in variables.items():
                patch.setenv(name, value)
            result = kedro_run(
                project_bin, project, "--env", "kafka", params=AS_SHIPPED, check=False
            )
        assert result.returncode == 1 and message in result.stderr, result.output
        assert "Started streaming query" not in result.output
        assert "\tat org.apache" not in result.output  # no Java stack
        failed.append(result)
    # `status` cannot read the lag with a wrong password: it says why, and exits 1.
    monkeypatch.setenv("KAFKA_SASL_PASSWORD", wrong_password)
    unread = streams(project_bin, project, "status", "--env", "kafka", check=False)
    assert unread.returncode == 1
    assert "raw_trips lag unknown" in unread.stdout
    assert (
        f"raw_trips: the Kafka broker at {servers} refused the SCRAM-SHA-512 "
        f"login of user '{SASL_USER}': check the password"
    ) in unread.stderr
    # At once (about 2 s), not after kafka-python's 30 s of retries. A bound,
    # not a value: the seconds are the network's and the machine's (Kedro's
    # start alone took 5 to 40 s on a busy machine); `status` with the right
    # password above is the yardstick.
    print(
        f"status: {status.seconds:.1f} s; with a wrong password {unread.seconds:.1f} s"
    )
    assert unread.seconds < status.seconds + 25

    outputs = [produced, right, status, validated, *shown, *failed, unread]
    secrets = (SASL_PASSWORD, wrong_password, store_password)
    for text in (result.output for result in outputs):
        assert not any(secret in text for secret in secrets)
    # Every file of the project (logs, data/, checkpoints, state) and of the
    # caches runs write (resolved Spark packages, the JVM's class archives).
    assert files_holding([project, *user_caches()], secrets) == []


def test_unreachable_broker_fails_within_the_timeout(fresh_project, project_bin):
    """Nothing listens on the port: the run fails at once, naming the address
    and how to start the broker (this machine refuses the connection; a list
    of brokers, another of which may answer, waits for kafka_connect_timeout,
    as tests/test_cluster.py shows)."""
    address = f"127.0.0.1:{free_port()}"
    point_at_broker(fresh_project, address)
    result = run(
        [
            project_bin / "kedro",
            "run",
            "--env",
            "kafka",
            *BOUNDED,
            "--params",
            "kafka_connect_timeout=5",
        ],
        cwd=fresh_project,
        check=False,
        timeout=180,
    )
    assert result.returncode != 0
    assert (
        f"the Kafka broker at {address} refuses connections: nothing listens "
        "there. Start the broker (`kedro streams broker start` runs one on "
        "localhost:9092)" in result.output
    )
    assert "Started streaming query" not in result.output
    # Spark and Kedro start in about 10 s; the wait itself is bounded by the timeout.
    assert result.seconds < 60, f"took {result.seconds:.0f} s"
