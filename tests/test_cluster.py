"""The same project beyond one machine: a real Spark standalone cluster (a
master and a worker in JVMs of their own), `kedro package` submitted with
spark-submit, and a real Spark Connect server.

The cluster's worker runs executors in folders of its own, without this
process's PYTHONPATH; the tests check that the executors did the work and that
the project's code reached them through Spark.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

from reference import (
    example_settings,
    expected_outputs,
    message_batches,
    zone_boroughs,
)
from support.checkpoints import read_table
from support.common import (
    AS_SHIPPED,
    BOUNDED,
    CHUNK,
    PACKAGE,
    SPARK_VERSION,
    free_port,
    quiet_env,
    run,
    tool_service,
)
from support.compare import assert_matches_reference, example_reference
from support.kafka import point_at_broker
from support.project import bundled_lines

# Where Spark reads and writes in these runs: a folder every process of the
# test "cluster" sees, as shared storage would be.
ROOT = "STREAMING_DATA_ROOT"


def cluster_env(spark_cluster, data_root: Path, **extra: str) -> dict[str, str]:
    return {
        ROOT: str(data_root),
        "SPARK_MASTER_URL": spark_cluster["address"],
        **extra,
    }


def land_example(project_bin, project: Path, env: str, variables: dict) -> None:
    run(
        [project_bin / "python", "-m", "tools", "trips", "init", "--env", env],
        cwd=project,
        env=variables,
    )


def executor_task_counts(spark_cluster) -> dict[str, int]:
    """Tasks each application's executors finished, from the workers' logs."""
    counts = {}
    for log in spark_cluster["data_dir"].glob("worker-*/app-*/*/stderr"):
        finished = len(re.findall(r"Finished task", log.read_text(errors="replace")))
        counts[log.parent.parent.name] = (
            counts.get(log.parent.parent.name, 0) + finished
        )
    return counts


def test_example_on_a_standalone_cluster(
    fresh_project, project_bin, spark_cluster, deps_python, tmp_path
):
    """`kedro run --env cluster` on a real master and worker: executors do the
    work, the project's code reaches them through Spark, the numbers are the
    reference's; a relative checkpoint is refused before any query starts."""
    data_root = tmp_path / "shared"
    variables = cluster_env(spark_cluster, data_root)
    land_example(project_bin, fresh_project, "cluster", variables)
    before = executor_task_counts(spark_cluster)

    result = run(
        [project_bin / "kedro", "run", "--env", "cluster", *AS_SHIPPED],
        cwd=fresh_project,
        env=variables,
        timeout=600,
    )
    assert f"Sent the package {PACKAGE} to the executors" in result.output
    new_apps = {
        app: tasks
        for app, tasks in executor_task_counts(spark_cluster).items()
        if app not in before
    }
    assert len(new_apps) == 1 and next(iter(new_apps.values())) > 0, new_apps
    # Tables and checkpoints on the shared root; only the driver's own
    # records (state_dir) in the project.
    assert sorted(p.name for p in (fresh_project / "data/cluster").iterdir()) == [
        "streams"
    ]
    assert_matches_reference(
        fresh_project,
        example_reference(
            fresh_project, one_batch=True, input_root=data_root / "01_raw"
        ),
        output_root=str(data_root / "cluster"),
    )

    # A Python UDF on the executors imports the project from what Spark sent
    # them: their Python does not have the project installed.
    probe = f"""
from pathlib import Path
from kedro.framework.session import KedroSession
from kedro.framework.startup import bootstrap_project
from pyspark.sql import functions as F

bootstrap_project(Path.cwd())
with KedroSession.create(env="cluster") as session:
    session.load_context()
    from kedro_streaming import spark_session

    def where(_):
        import os
        import {PACKAGE}.pipelines.ingest.nodes as nodes
        return nodes.__file__ + " | " + os.getcwd()

    print("EXECUTOR:", spark_session().range(1).select(F.udf(where)("id")).first()[0])
"""
    result = run(
        [project_bin / "python", "-c", probe],
        cwd=fresh_project,
        env={**variables, "PYSPARK_PYTHON": str(deps_python)},
    )
    module, cwd = re.search(r"EXECUTOR: (.*) \| (.*)", result.stdout).groups()
    assert f"{PACKAGE}.zip" in module and str(fresh_project) not in module
    assert cwd.startswith(str(spark_cluster["data_dir"]))

    # Relative paths would be the executors' own folders: refused, with the fix.
    relative = run(
        [project_bin / "kedro", "run", "--env", "cluster", *AS_SHIPPED],
        cwd=fresh_project,
        env={**variables, ROOT: "data"},
        check=False,
    )
    assert relative.returncode != 0
    assert "does not see this process's relative paths" in relative.output
    assert "'data/cluster/checkpoints/bronze_trips'" in relative.output
    assert "conf/cluster/globals.yml" in relative.output
    assert "Started streaming query" not in relative.output


def test_packaged_project_submitted_to_the_cluster(
    fresh_project, project_bin, spark_cluster, deps_python, tmp_path
):
    """`kedro package`, then spark-submit (client mode) of the wheel with the
    conf archive: the driver's Python has the dependencies only, so the
    project comes from the wheel; the Kafka connector from spark.yml."""
    data_root = tmp_path / "shared"
    variables = cluster_env(spark_cluster, data_root)
    land_example(project_bin, fresh_project, "cluster", variables)
    run([project_bin / "kedro", "package"], cwd=fresh_project)

    result = run(
        [project_bin / "kedro", "streams", "submit", "--env", "cluster", "--"]
        + AS_SHIPPED,
        cwd=fresh_project,
        env={
            **variables,
            "PYSPARK_DRIVER_PYTHON": str(deps_python),
            "PYSPARK_PYTHON": str(deps_python),
        },
        timeout=600,
    )
    command = next(
        line for line in result.stderr.splitlines() if "spark-submit" in line
    )
    assert "spark-submit --properties-file dist/spark-cluster.conf" in command
    assert f"--conf-source dist/conf-{PACKAGE}.tar.gz" in command
    properties = (fresh_project / "dist/spark-cluster.conf").read_text()
    assert (
        "spark.jars.packages org.apache.spark:spark-sql-kafka-0-10_2.13:" in properties
    )
    assert f"spark.master {spark_cluster['address']}" in properties
    assert "Query hourly_borough_summary ended" in result.output
    assert_matches_reference(
        fresh_project,
        example_reference(
            fresh_project, one_batch=True, input_root=data_root / "01_raw"
        ),
        output_root=str(data_root / "cluster"),
    )


def test_example_over_spark_connect_bounded_then_continuous(
    fresh_project, project_bin, connect_server, tmp_path
):
    """`kedro run --env connect` against a real Spark Connect server: bounded,
    the reference's numbers and progress lines; continuous, a new file is
    processed and SIGTERM stops the queries cleanly."""
    data_root = tmp_path / "shared"
    variables = {ROOT: str(data_root), "SPARK_REMOTE_URL": connect_server["address"]}
    land_example(project_bin, fresh_project, "connect", variables)

    result = run(
        [project_bin / "kedro", "run", "--env", "connect", *BOUNDED],
        cwd=fresh_project,
        env=variables,
    )
    log = result.output
    assert "Query bronze_trips batch 0:" in log
    bronze_total = re.search(
        r"Query bronze_trips ended: \d+ batches, (\d+) rows in, (\d+) written, "
        r"(\d+) quarantined",
        log,
    )
    expected = example_reference(fresh_project, input_root=data_root / "01_raw")
    rejected = sum(expected.rejections.values())
    assert bronze_total.groups() == (
        str(len(expected.bronze) + rejected),
        str(len(expected.bronze) + rejected),
        str(rejected),
    )
    assert_matches_reference(
        fresh_project, expected, output_root=str(data_root / "connect")
    )

    # Continuous: a file landed while it runs becomes one more micro-batch.
    log_path = tmp_path / "continuous.log"
    with log_path.open("w") as output:
        process = subprocess.Popen(
            [project_bin / "kedro", "run", "--env", "connect"]
            + ["--params", "trigger_interval=1 second"],
            cwd=fresh_project,
            env=quiet_env(**variables),
            stdout=output,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_for(log_path, "Streaming queries running", process)
            run(
                [project_bin / "python", "-m", "tools", "trips", "land"]
                + ["--env", "connect", "--files", "1", "--interval", "0"],
                cwd=fresh_project,
                env=variables,
            )
            wait_for(
                log_path, r"Query bronze_trips batch \d+: [1-9]\d* rows in", process
            )
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=120) == 0, log_path.read_text()[-5000:]
        finally:
            if process.poll() is None:
                process.kill()
    log = log_path.read_text()
    assert "Stopping streaming query 'bronze_trips'" in log
    bronze = read_table(data_root / "connect", "02_intermediate/bronze_trips")
    assert len(bronze) == len(expected.bronze) + rejected + 60


def test_kafka_over_spark_connect(
    fresh_project, project_bin, connect_server, broker_log_on_failure, tmp_path
):
    """Kafka through a Spark Connect server, whose connector it is: the broker
    check runs in the server (an unreachable broker fails the run before any
    query starts), and ingest then aggregate give the reference's tables."""
    data_root = tmp_path / "shared"
    env = fresh_project / "conf/connect_kafka"
    env.mkdir()
    for source in ("kafka/catalog.yml", "kafka/credentials.yml", "connect/spark.yml"):
        shutil.copy(fresh_project / "conf" / source, env)
    variables = {ROOT: str(data_root), "SPARK_REMOTE_URL": connect_server["address"]}
    roots = f"input_root: {data_root}/01_raw\noutput_root: {data_root}/kafka\n"

    def point_at(servers: str) -> str:
        trips, _ = point_at_broker(fresh_project, servers)
        settings = (fresh_project / "conf/kafka/globals.yml").read_text()
        (env / "globals.yml").write_text(
            roots + settings.replace("output_root: data/kafka\n", "")
        )
        return trips

    # Two addresses: with one local address that refuses, the client-side
    # check would fail first, without asking the server.
    point_at(f"127.0.0.1:{free_port()},127.0.0.1:{free_port()}")
    unreachable = run(
        [project_bin / "kedro", "run", "--env", "connect_kafka"]
        + ["--params", "trigger=available_now,kafka_connect_timeout=5"],
        cwd=fresh_project,
        env=variables,
        check=False,
    )
    assert unreachable.returncode != 0
    assert "did not answer within 5 s" in unreachable.output
    assert "Started streaming query" not in unreachable.output

    trips = point_at(broker_log_on_failure.bootstrap_servers)
    land_example(project_bin, fresh_project, "connect_kafka", variables)
    lines = bundled_lines(fresh_project)
    run(
        [project_bin / "python", "-m", "tools", "trips", "send", "--env"]
        + ["connect_kafka", "--partitions", "1", "--topic", trips],
        cwd=fresh_project,
        env=variables,
    )
    for pipeline in ("ingest", "aggregate"):
        run(
            [project_bin / "kedro", "run", "--env", "connect_kafka"]
            + ["--pipelines", pipeline, *BOUNDED],
            cwd=fresh_project,
            env=variables,
        )
    expected = expected_outputs(
        message_batches([line.encode() for line in lines], CHUNK),
        zone_boroughs(data_root / "01_raw/taxi_zone_lookup.csv"),
        example_settings(fresh_project),
    )
    assert_matches_reference(
        fresh_project, expected, output_root=str(data_root / "kafka")
    )


def test_connect_server_with_another_connector_fails_before_any_stream(
    fresh_project, project_bin, tmp_path
):
    """The Kafka connector is the Connect server's: one that does not fit the
    Spark the server reports stops the run before any query starts, naming
    the fix; the spark.yml settings the server keeps are named."""
    other = fresh_project / "conf/other_server"
    other.mkdir()
    (other / "spark.yml").write_text(
        "spark.jars.packages: org.apache.spark:spark-sql-kafka-0-10_2.13:3.5.1\n"
        "spark.driver.memory: 1g\n"
    )
    data_root = tmp_path / "shared"
    shutil.copytree(fresh_project / "data/01_raw", data_root / "01_raw")
    with tool_service(
        "connect",
        fresh_project,
        project_bin,
        tmp_path / "server",
        "--env",
        "other_server",
    ) as server:
        result = run(
            [project_bin / "kedro", "run", "--env", "connect", *AS_SHIPPED],
            cwd=fresh_project,
            env={ROOT: str(data_root), "SPARK_REMOTE_URL": server["address"]},
            check=False,
        )
    assert result.returncode != 0
    output = " ".join(result.output.split())  # the error may be wrapped
    kept = re.search(r"keeps its own (.*?): set them where", output)
    assert {"spark.driver.memory", "spark.jars.packages"} <= set(kept[1].split(", "))
    assert (
        f"spark-sql-kafka-0-10_2.13:3.5.1, but the running Spark is {SPARK_VERSION}"
        in output
    )
    assert "restart the Spark Connect server at sc://" in output
    assert (
        f"--packages org.apache.spark:spark-sql-kafka-0-10_2.13:{SPARK_VERSION}"
        in output
    )
    assert "Started streaming query" not in output
    assert not (data_root / "connect").exists()


def wait_for(log_path: Path, pattern: str, process, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not re.search(pattern, log_path.read_text()):
        assert process.poll() is None, log_path.read_text()[-5000:]
        assert time.monotonic() < deadline, f"no '{pattern}' in the log"
        time.sleep(1)
