"""The example's work as a Spark Declarative Pipeline, run by `spark-pipelines`.

handwritten.py's stages declared with PySpark's ``pyspark.pipelines`` (4.1+):
the JSON trips as a typed stream into the streaming table ``bronze``; with
``--stage all`` also ``summary`` (bronze as a stream, 10-minute watermark on
the drop-off time, left join with the zone boroughs (broadcast), 1-hour
windows per borough, the same aggregates) and ``quarantine`` (bronze's rows
failing the same check). Writes the pipeline spec (``spark-pipeline.yml``)
and its Python definitions (``pipeline.py``) into OUT_DIR, starts a Spark
Connect server in this process with the project's spark.yml (on a port the
system picks, and with OUT_DIR as its warehouse: each table is a folder of
parquet files there, written by the same file sink as the script's), then
runs ``spark-pipelines run --remote sc://localhost:PORT`` against it, with
spark.yml's ``spark.sql.*`` settings as the spec's configuration. SDP runs
each flow with availableNow, a flow once the flows it reads have completed.

Prints the CLI's event lines, then lines like handwritten.py's: the rows each
stage's query read (bronze's, summary's), from what the Spark UI's Structured
Streaming tab keeps of every query of the server (the flows run in the CLI's
session, where this process can add no listener; counted from ``bronze``
after the run when spark.yml turns the UI off); the seconds between the CLI's
event lines as they arrive: ingest from "Starting run" to ``bronze``'s
completion, aggregate from there to the last of ``summary`` and
``quarantine``. Needs only the bench venv, with pyspark's ``pipelines`` extra
(grpcio and the rest of the Spark Connect client).

Two departures from a plain `spark-pipelines run`, both forced by SDP 4.2:

- Watermark: ``DataFrame.withWatermark`` over a pipeline table fails when
  the flow is defined ([TABLE_OR_VIEW_NOT_FOUND] bronze: the Connect server
  analyses the input of a watermark as soon as it receives it, before the
  graph has its tables), so the summary's flow reads bronze with SQL's
  WATERMARK clause (``spark.sql`` inside a flow is analysed with the graph).
  It builds the same EventTimeWatermark node.
- Server: without ``--remote``, the CLI starts its own server on Spark
  Connect's fixed port 15002 and its client connects there (only with
  SPARK_TESTING, which also changes Spark's behaviour, does it use another),
  so this script starts the server itself, as the CLI would (a SparkContext
  with the Connect plugin), in one JVM with the spark.yml settings. The CLI
  still starts a JVM of its own (spark-submit, which runs its Python
  client): one JVM start more than a local `spark-pipelines run`, where
  that JVM is the server; the "sdp:" line prints how long the CLI took to
  come up.

    python benchmarks/declarative.py PROJECT_DIR OUT_DIR [--stage ingest|all]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import yaml
from handwritten import TRIP_SCHEMA, ZONE_SCHEMA
from pyspark.sql import SparkSession

TABLES = ("bronze", "summary", "quarantine")
HOST = "127.0.0.1"

INGEST = '''\
"""The example's work as a Spark Declarative Pipeline (by declarative.py)."""

from pyspark import pipelines as dp
from pyspark.sql import functions as F

TRIP_SCHEMA = {trip_schema!r}
ZONE_SCHEMA = {zone_schema!r}


@dp.table(name="bronze", format="parquet")
def bronze():
    return spark.readStream.schema(TRIP_SCHEMA).json({landing!r})
'''

AGGREGATE = """

@dp.table(name="summary", format="parquet")
def summary():
    zones = spark.read.csv({zones!r}, header=True, schema=ZONE_SCHEMA)
    boroughs = F.broadcast(
        zones.select(
            F.col("LocationID").alias("PULocationID"), F.col("Borough").alias("borough")
        )
    )
    # Not .withWatermark(): SDP 4.2 analyses its input when the flow is
    # defined, before bronze exists (see declarative.py).
    trips = spark.sql(
        "SELECT * FROM STREAM bronze "
        "WATERMARK lpep_dropoff_datetime DELAY OF INTERVAL 10 MINUTES AS trips"
    )
    return (
        trips.join(boroughs, "PULocationID", "left")
        .groupBy(F.window("lpep_dropoff_datetime", "1 hour"), "borough")
        .agg(
            F.count(F.lit(1)).alias("trip_count"),
            F.avg("passenger_count").alias("avg_passengers"),
            F.sum("trip_distance").alias("total_distance"),
            F.avg("trip_distance").alias("avg_distance"),
            F.sum("fare_amount").alias("total_fare"),
            F.avg("fare_amount").alias("avg_fare"),
            F.sum("total_amount").alias("total_amount"),
            F.avg("total_amount").alias("avg_amount"),
        )
    )


@dp.table(name="quarantine", format="parquet")
def quarantine():
    return spark.readStream.table("bronze").filter(
        "fare_amount < 0 OR PULocationID IS NULL"
    )
"""


def write_pipeline(project: Path, out: Path, stage: str, spark_conf: dict) -> Path:
    """The spec and the definitions in ``out``; the spec's path."""
    raw = project.resolve() / "data/01_raw"
    definitions = INGEST.format(
        trip_schema=TRIP_SCHEMA,
        zone_schema=ZONE_SCHEMA,
        landing=str(raw / "trips_landing"),
    )
    if stage == "all":
        definitions += AGGREGATE.format(zones=str(raw / "taxi_zone_lookup.csv"))
    (out / "pipeline.py").write_text(definitions)
    spec = {
        "name": "bench_example",
        # Where SDP keeps each flow's checkpoint.
        "storage": (out / "checkpoints").as_uri(),
        "configuration": {
            key: value
            for key, value in spark_conf.items()
            if key.startswith("spark.sql.")
        },
        "libraries": [{"glob": {"include": "pipeline.py"}}],
    }
    path = out / "spark-pipeline.yml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False, width=1000))
    return path


def start_server(spark_conf: dict, out: Path, token: str) -> tuple[SparkSession, int]:
    """A Spark Connect server in this process's JVM, with the project's Spark
    settings and ``out`` as its warehouse; the session and the server's port."""
    conf = dict(spark_conf)
    plugins = [p for p in conf.get("spark.plugins", "").split(",") if p]
    conf.update(
        {
            "spark.plugins": ",".join(
                [*plugins, "org.apache.spark.sql.connect.SparkConnectPlugin"]
            ),
            # 0: the system picks a free port; the server says which below.
            "spark.connect.grpc.binding.port": "0",
            "spark.connect.grpc.binding.address": HOST,
            "spark.connect.authenticate.token": token,
            # The pipeline's tables: spark_catalog.default.<name> in out/<name>.
            "spark.sql.warehouse.dir": str(out),
        }
    )
    spark = SparkSession.builder.config(map=conf).getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    jvm = spark.sparkContext._jvm
    # Each client session's release after `spark.stop()` is logged as an error
    # ("Session was closed"); the CLI reports the pipeline's own errors.
    jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
        "org.apache.spark.sql.connect.utils.ErrorUtils",
        jvm.org.apache.logging.log4j.Level.FATAL,
    )
    service = getattr(jvm, "org.apache.spark.sql.connect.service.SparkConnectService$")
    return spark, getattr(service, "MODULE$").localPort()


def run_pipeline(spec: Path, port: int, token: str) -> dict[str, float]:
    """Runs ``spark-pipelines run`` against the server; when each of its
    event lines arrived (``time.monotonic()``), by the line's end."""
    command = [
        str(Path(sys.executable).parent / "spark-pipelines"),
        "run",
        "--spec",
        str(spec),
        "--remote",
        # "localhost", not HOST: the client sends the token without TLS only
        # to a host of that name.
        f"sc://localhost:{port}",
    ]
    env = {
        **os.environ,
        # The CLI's launcher finds cli.py, and runs it, with this Python.
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_CONNECT_AUTHENTICATE_TOKEN": token,
    }
    arrived = {"launched": time.monotonic()}
    with subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, text=True, bufsize=1
    ) as cli:
        try:
            for line in cli.stdout:
                now = time.monotonic()
                print(line, end="", flush=True)
                # "2026-01-01 00:00:00: Flow spark_catalog.default.bronze has COMPLETED."
                event = line.partition(": ")[2].strip()
                arrived.setdefault(event, now)
        finally:
            if cli.poll() is None:
                cli.terminate()
    if cli.returncode != 0 or "Run is COMPLETED." not in arrived:
        sys.exit(f"spark-pipelines run did not complete (exit code {cli.returncode})")
    return arrived


def rows_read(spark: SparkSession) -> dict[str, int]:
    """Rows each of the server's streaming queries read, by table, as the
    Structured Streaming UI keeps them (it hears every session's queries);
    empty without the UI."""
    listener = spark._jsparkSession.sharedState().streamingQueryStatusListener()
    if listener.isEmpty():
        return {}
    jvm = spark.sparkContext._jvm
    store = jvm.org.apache.spark.sql.execution.ui.StreamingQueryStatusStore(
        listener.get().store()
    )
    for _ in range(50):
        queries = store.allQueryUIData()
        queries = [queries.apply(index) for index in range(queries.size())]
        # A query's end comes after its last progress, in the listener's order.
        if not any(query.summary().isActive() for query in queries):
            break
        time.sleep(0.1)
    return {
        query.summary().name().rpartition(".")[2]: sum(
            progress.numInputRows() for progress in query.recentProgress()
        )
        for query in queries
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "project", type=Path, help="a generated project (its spark.yml and data)"
    )
    parser.add_argument(
        "out", type=Path, help="where the spec, definitions, tables and checkpoints go"
    )
    parser.add_argument("--stage", choices=("ingest", "all"), default="all")
    args = parser.parse_args()

    if importlib.util.find_spec("grpc") is None:
        sys.exit(
            "spark-pipelines is a Spark Connect client: "
            f"{sys.executable} -m pip install 'pyspark[pipelines]'"
        )
    out = args.out.resolve()
    earlier = [name for name in (*TABLES, "checkpoints") if (out / name).exists()]
    if earlier:
        sys.exit(f"{out} holds {', '.join(earlier)} of an earlier run: remove them.")
    out.mkdir(parents=True, exist_ok=True)
    spark_conf = {
        key: str(value)
        for key, value in yaml.safe_load(
            (args.project / "conf/base/spark.yml").read_text()
        ).items()
    }
    spec = write_pipeline(args.project, out, args.stage, spark_conf)
    token = secrets.token_hex(16)

    started = time.monotonic()
    spark, port = start_server(spark_conf, out, token)
    try:
        arrived = run_pipeline(spec, port, token)
        rows = rows_read(spark) or dict.fromkeys(
            TABLES, spark.read.parquet(str(out / "bronze")).count()
        )
    finally:
        spark.stop()

    def flow(table: str) -> float:
        return arrived[f"Flow spark_catalog.default.{table} has COMPLETED."]

    begun = arrived["Starting run..."]
    print(f"ingest: {rows['bronze']} rows in {flow('bronze') - begun:.2f} s")
    if args.stage == "all":
        ended = max(flow("summary"), flow("quarantine"))
        print(f"aggregate: {rows['summary']} rows in {ended - flow('bronze'):.2f} s")
    print(
        f"sdp: server up in {arrived['launched'] - started:.1f} s; CLI: up in "
        f"{arrived['Creating Spark session...'] - arrived['launched']:.1f} s, "
        f"graph defined in {begun - arrived['Creating Spark session...']:.1f} s, "
        f"run {arrived['Run is COMPLETED.'] - begun:.1f} s"
    )


if __name__ == "__main__":
    main()
