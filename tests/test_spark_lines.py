"""The other Spark lines: a project generated for each runs as on the default one.

The rest of the suite runs on the default line (cookiecutter.json's
``spark_version``). Here each other line that resolves on Maven Central gets
its own project (``kedro new --config`` with ``spark_version``), its own
virtualenv and its own JVMs, the session's broker aside: the project's own
tests, the bounded example on files, from Kafka and into Delta tables, each
compared with the independent computation, and Real-Time Mode where the line
has it (refused before start where it does not). Then the project moves up
(`kedro streams spark-line`, docs/spark-lines.md) to the next line the
session tests, its Delta tables, windows' state and checkpoints with it, and
resumes: every figure of both runs compared with the computation.

``STARTER_OTHER_SPARK_VERSIONS`` (comma-separated) chooses the lines: by
default 4.0.0, the oldest (with 4.2.0, the default line, the suite brackets
the range within CI's budget); ``4.0.0,4.1.1`` adds the middle one; empty
skips them. Each line's project moves to the next line up among these and
the default one: 4.0 to 4.2 by default; 4.0 to 4.1 and 4.1 to 4.2 with
``4.0.0,4.1.1``.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys

import pytest
import yaml
from reference import (
    current_boroughs,
    example_settings,
    expected_outputs,
    json_landing_batches,
    message_batches,
    zone_boroughs,
)
from support.checkpoints import assert_one_commit_per_batch
from support.common import (
    AS_SHIPPED,
    SHIPPED_JIT,
    SPARK_VERSION,
    STARTER_ROOT,
    kedro_run,
    run,
    streams,
)
from support.compare import assert_matches_reference
from support.kafka import (
    assert_each_message,
    point_at_broker,
    send_to_one_partition,
    wait_for_offsets,
)
from support.processes import start_kedro
from support.project import (
    OTHER_SPARK_VERSIONS,
    PREFETCHED_WHEELS,
    bundled_lines,
    make_line_project,
)
from support.security import secure_kafka

# The whole topic in one micro-batch: the reference replays the same batch.
ONE_BATCH = 10_000
# Each line's project moves up to the next line the session tests.
LINES_UP = sorted({*OTHER_SPARK_VERSIONS, SPARK_VERSION}, key=lambda v: v.split("."))
DELTA = ["--env", "delta", "--pipelines", "ingest,aggregate,live"]


@pytest.fixture(scope="module", params=OTHER_SPARK_VERSIONS)
def line_project(request, tmp_path_factory):
    """The line's project and its virtualenv's bin/."""
    version = request.param
    project, bin_dir = make_line_project(
        tmp_path_factory.mktemp(f"spark-{version}"), version
    )
    return version, project, bin_dir


def test_example_runs_on_another_spark_line(
    line_project, broker_log_on_failure, monkeypatch
):
    """Own tests, files, Kafka, Delta and Real-Time Mode on one Spark line,
    then the project moved up a line with its state."""
    version, project, bin_dir = line_project
    python = bin_dir / "python"
    installed = run(
        [python, "-c", "import pyspark; print(pyspark.__version__)"], cwd=project
    )
    assert installed.stdout.split() == [version]

    # The plugin's own tests run on the default line (tests/test_plugin.py);
    # here, for CI's 45 minutes, the project's guards of the ingest query's
    # plan and of its Spark settings, which Spark may build otherwise from
    # line to line, the event-time timers recipe of docs/stateful.md (an
    # alert after silence over two streams), which is this line's own
    # (transformWithStateInPandas on 4.0), and the runs below, which take
    # every node through this line's Spark and compare each figure with the
    # reference. The processing-time recipe (busy spells, 89 s of waiting
    # for its timers) runs on the default line only, for CI's 45 minutes.
    own = run(
        [
            *(python, "-m", "pytest", "-q", "-p", "no:cacheprovider"),
            "tests/test_spark_conf.py",
            "tests/pipelines/ingest/test_nodes.py::"
            "test_ingest_plan_decodes_each_record_once_in_compiled_code",
            "tests/pipelines/ingest/test_nodes.py::"
            "test_ingest_query_is_compiled_once_not_per_micro_batch",
            "tests/test_docs.py::test_stateful_recipe["
            "test_an_order_not_picked_up_in_time_is_one_alert_once_the_watermark_passes]",
        ],
        cwd=project,
        env=SHIPPED_JIT,
    )
    assert " passed" in own.stdout and "failed" not in own.stdout
    print(f"Spark {version}: the project's own tests: {own.seconds:.1f} s")

    # Kafka: the example's lines as messages, then bounded. (The landed
    # files go through this line's Spark in the Delta run below.)
    # The project over mutual TLS (PEM stores); the test's own clients
    # through the plain listener of the same broker.
    servers = broker_log_on_failure.bootstrap_servers
    secured = secure_kafka(monkeypatch, broker_log_on_failure, "MTLS")
    trips_topic, _ = point_at_broker(project, secured, ONE_BATCH)
    messages = [line.encode() for line in bundled_lines(project)]
    send_to_one_partition(servers, trips_topic, messages)
    ran = kedro_run(bin_dir, project, "--env", "kafka", params=AS_SHIPPED)
    assert f"Spark {version}" in ran.output
    expected = expected_outputs(
        message_batches(messages, ONE_BATCH),
        zone_boroughs(project / "data/01_raw/taxi_zone_lookup.csv"),
        example_settings(project),
    )
    assert_matches_reference(project, expected, "data/kafka")
    status = streams(bin_dir, project, "status", "--env", "kafka").stdout
    assert f"raw_trips lag {trips_topic} 0 messages" in status

    # Delta tables, the live summary's MERGE and the zone table kept from its
    # changes included, with this line's package: the first half of the
    # landed files here, the rest once the project has moved up a line.
    landing = project / "data/01_raw/trips_landing"
    later = project.parent / "landed-later"
    later.mkdir()
    files = sorted(landing.glob("*.json"))
    for path in files[len(files) // 2 :]:
        shutil.move(path, later / path.name)
    kedro_run(bin_dir, project, *DELTA, params=AS_SHIPPED)

    # Real-Time Mode where the line has it (its refusal on Spark 4.0, before
    # start, is the plugin's tests'): each trip of the topic out on the topic
    # of its verdict, as the reference says.
    if not version.startswith("4.0."):
        assert_realtime(project, bin_dir, broker_log_on_failure, trips_topic, messages)
    move_up_and_resume(project, bin_dir, version, later)


def move_up_and_resume(project, bin_dir, version: str, later) -> None:
    """docs/spark-lines.md's move to the next line, then the rest of the
    landed files: one run on each line, as the reference replays them."""
    first = json_landing_batches(project / "data/01_raw/trips_landing")
    up = LINES_UP[LINES_UP.index(version) + 1]
    moved = streams(bin_dir, project, "spark-line", up).stdout
    assert f"Moved the project from Spark {version} to {up}:" in moved
    assert f"requirements.txt: pyspark=={version} -> pyspark=={up}" in moved
    uv = os.path.join(os.path.dirname(sys.executable), "uv")
    links = [arg for folder in PREFETCHED_WHEELS for arg in ("--find-links", folder)]
    venv_python = ("--python", bin_dir / "python")
    install = [uv, "pip", "install", "-q", "--compile-bytecode", *venv_python, *links]
    run([*install, "-r", "requirements.txt", "-e", ".[dev,connect]"], cwd=project)
    installed = run(
        [bin_dir / "python", "-c", "import pyspark; print(pyspark.__version__)"],
        cwd=project,
    )
    assert installed.stdout.split() == [up]
    for path in sorted(later.iterdir()):
        shutil.move(path, project / "data/01_raw/trips_landing" / path.name)
        os.utime(project / "data/01_raw/trips_landing" / path.name)
    # `kedro streams validate` (the docs' step 3) makes the same checks as
    # the run's own, which says each query's earlier Spark the same way.
    ran = kedro_run(bin_dir, project, *DELTA, params=AS_SHIPPED)
    assert f"Spark {up}" in ran.output
    assert (
        f"'hourly_borough_summary' last ran on Spark {version}, and now runs "
        f"on {up}." in ran.output
    )
    # Each run's files in one micro-batch, and the batch after it that moves
    # the watermark (a bounded run's last): a window the first run left open
    # closes in the second, with the rows it kept in its state.
    second = json_landing_batches(project / "data/01_raw/trips_landing")[len(first) :]
    root = project / "data/01_raw"
    expected = expected_outputs(
        [[r for batch in first for r in batch], [], [r for b in second for r in b], []],
        zone_boroughs(root / "taxi_zone_lookup.csv"),
        example_settings(project),
        live_boroughs=current_boroughs(root),
    )
    assert expected.late_trips  # the second run's trips include late ones
    assert_matches_reference(project, expected, "data/delta", live=True)
    # Nothing read twice: each batch one commit of its table, by one query.
    assert_one_commit_per_batch(project)


def assert_realtime(project, bin_dir, broker, trips_topic, messages) -> None:
    """The realtime pipeline sends each trip of the topic on once, to the
    topic of its verdict."""
    servers = broker.bootstrap_servers
    kafka = yaml.safe_load((project / "conf/kafka/globals.yml").read_text())["kafka"]
    outputs = [kafka["checked_trips_topic"], kafka["rejected_trips_topic"]]
    log = project / "realtime.log"
    realtime = ["run", "--env", "kafka", "--pipelines", "realtime"]
    process = start_kedro(
        bin_dir,
        project,
        [*realtime, "--params", "realtime_checkpoint_interval=5 seconds"],
        log,
    )
    try:
        records = wait_for_offsets(
            servers, outputs, len(messages), process=process, log=log
        )
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0, log.read_text()[-5000:]
    copies = assert_each_message(project, records, messages, trips_topic, outputs)
    assert all(len(written) == 1 for written in copies.values())


def test_a_spark_line_without_its_packages_is_refused_when_the_project_is_made(
    tmp_path,
):
    """4.3 has no Delta release yet: `kedro new` stops, naming the lines it makes."""
    config = tmp_path / "config.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "project_name": "Too New",
                "output_dir": str(tmp_path),
                "spark_version": "4.3.0",
                "example": "taxi",
            }
        )
    )
    kedro_new = [sys.executable, "-m", "kedro", "new", "--starter", str(STARTER_ROOT)]
    refused = run([*kedro_new, "--config", str(config)], cwd=tmp_path, check=False)
    assert refused.returncode != 0
    assert (
        "spark_version '4.3.0' is not supported: choose a release of Spark 4.0, 4.1, "
        "4.2" in " ".join(refused.output.split())
    )
    assert not (tmp_path / "too-new").exists()
