"""The realtime pipeline's query started by hand: the floor of its pauses.

What a data engineer would write without Kedro and without kedro-streaming's
run: a SparkSession with the project's Spark settings (conf/base/spark.yml,
then the env's), the trips topic read by Spark's Kafka source, the project's
own node functions and declared rules (``parse_trips``, ``check_trips`` with the declared
expectations, ``trip_messages``: the same plan, expression for expression),
each message's record written as JSON by Spark's Kafka sink to its topic, in
Real-Time Mode with the same checkpoint interval. No hooks, no checks before
start, no progress log, no metrics. ``realtime_latency.py --run handwritten``
runs it in place of ``kedro run``, measured the same way.

    python handwritten_realtime.py PROJECT_DIR ENV TRIPS_TOPIC CHECKPOINT \
        --topics VALID,REJECTED --interval "2 minutes" --ui-port PORT --progress FILE
"""

from __future__ import annotations

import argparse
import json
import signal
import threading
from pathlib import Path

import yaml
from project_code import config_loader, node_modules
from pyspark.sql import SparkSession
from pyspark.sql import functions as F


def spark_settings(project: Path, env: str) -> dict[str, str]:
    settings: dict = {}
    for folder in ("base", env):
        path = project / "conf" / folder / "spark.yml"
        if path.exists():
            settings.update(yaml.safe_load(path.read_text()) or {})
    return {key: str(value) for key, value in settings.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("project", type=Path)
    parser.add_argument("env")
    parser.add_argument("trips_topic")
    parser.add_argument("checkpoint")
    parser.add_argument("--topics", required=True, help="valid,rejected")
    parser.add_argument("--interval", default="2 minutes")
    parser.add_argument("--ui-port", type=int, required=True)
    parser.add_argument("--servers", default="localhost:9092")
    parser.add_argument(
        "--progress", type=Path, required=True, help="where the batches' progress goes"
    )
    args = parser.parse_args()
    ingest, realtime = node_modules(args.project, "ingest", "realtime")
    parameters = config_loader(args.project, args.env)["parameters"]
    rules = parameters["trip_expectations"]
    valid, rejected = args.topics.split(",")

    settings = spark_settings(args.project, args.env)
    settings["spark.ui.port"] = str(args.ui_port)
    spark = SparkSession.builder.config(map=settings).getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    zones = spark.read.csv(
        str(args.project / "data/01_raw/taxi_zone_lookup.csv"), header=True
    ).selectExpr("CAST(LocationID AS INT) AS LocationID", "Borough", "Zone")
    raw = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", args.servers)
        .option("subscribe", args.trips_topic)
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", "true")
        .load()
    )
    checked = ingest.check_trips(ingest.parse_trips(raw), zones, rules)
    messages = realtime.trip_messages(
        checked, zones, {"valid": valid, "rejected": rejected}
    )
    record = F.col("value")
    # Every field named, null or not, as the project's Kafka sink writes it.
    as_json = {"ignoreNullFields": "false"}
    query = (
        messages.select(
            "key",
            "topic",
            F.when(F.col("topic") == valid, F.to_json(record[valid], as_json))
            .otherwise(F.to_json(record[rejected], as_json))
            .alias("value"),
        )
        .writeStream.format("kafka")
        .queryName("trip_messages")
        .option("kafka.bootstrap.servers", args.servers)
        .option("checkpointLocation", args.checkpoint)
        .outputMode("update")
        .trigger(realTime=args.interval)
        .start()
    )
    print("Started streaming query 'trip_messages'", flush=True)
    # Stopped from this thread: a py4j call inside the signal handler would
    # cut into the one the thread is waiting in.
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    while query.isActive and not stopping.is_set():
        query.awaitTermination(0.5)
    query.stop()
    # As kedro-streaming's progress log has them: each batch's end and the
    # durations Spark reports.
    args.progress.write_text(
        "".join(
            json.dumps(
                {
                    "query": "trip_messages",
                    "batch": p["batchId"],
                    "time": p["timestamp"],
                    "duration_ms": p["batchDuration"],
                    "spark_durations_ms": p["durationMs"],
                }
            )
            + "\n"
            for p in query.recentProgress
        )
    )
    spark.stop()


if __name__ == "__main__":
    main()
