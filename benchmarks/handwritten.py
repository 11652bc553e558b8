"""The example's work written by hand in PySpark: the benchmark's baseline.

What a data engineer would write without Kedro: read the JSON trips as a typed
stream into a parquet file sink, then read that sink back as a stream, join it
with the zone lookup, and write 1-hour windows per pickup borough with a
10-minute watermark, in append mode, while a second stream over the sink
writes the rows failing a check to a quarantine table. Bounded (availableNow), one stage after
the other, with the Spark settings of the generated project's spark.yml.

With ``--plan project``, the same stages run the project's own plan by hand:
its node functions and declared rules (``parse_trips`` over the landing
files read as text, ``check_trips`` with the 32 expectations into bronze;
``select_rejected_trips`` and ``summarise_hourly_by_borough`` over bronze read
back), expression for expression, with no Kedro, no hooks, no checks before
start and no progress log: what `kedro run` adds to its own plan.

    python benchmarks/handwritten.py PROJECT_DIR OUT_DIR [--stage ingest|aggregate|all]
                                     [--plan light|project]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import yaml
from project_code import config_loader, node_modules
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

TRIP_SCHEMA = (
    "VendorID INT, lpep_pickup_datetime TIMESTAMP, lpep_dropoff_datetime TIMESTAMP, "
    "store_and_fwd_flag STRING, RatecodeID INT, PULocationID INT, DOLocationID INT, "
    "passenger_count INT, trip_distance DOUBLE, fare_amount DOUBLE, extra DOUBLE, "
    "mta_tax DOUBLE, tip_amount DOUBLE, tolls_amount DOUBLE, ehail_fee DOUBLE, "
    "improvement_surcharge DOUBLE, total_amount DOUBLE, payment_type INT, "
    "trip_type INT, congestion_surcharge DOUBLE"
)
ZONE_SCHEMA = "LocationID INT, Borough STRING, Zone STRING, service_zone STRING"


def ingest(spark: SparkSession, landing: str, out: Path) -> int:
    trips = spark.readStream.schema(TRIP_SCHEMA).json(landing)
    query = run_bounded(trips, out, "bronze")
    return sum(p["numInputRows"] for p in query.recentProgress)


def aggregate(spark: SparkSession, zones_csv: str, out: Path) -> int:
    zones = spark.read.csv(zones_csv, header=True, schema=ZONE_SCHEMA)
    boroughs = F.broadcast(
        zones.select(
            F.col("LocationID").alias("PULocationID"), F.col("Borough").alias("borough")
        )
    )
    trips = spark.readStream.schema(TRIP_SCHEMA).parquet(str(out / "bronze"))
    summary = (
        trips.withWatermark("lpep_dropoff_datetime", "10 minutes")
        .join(boroughs, "PULocationID", "left")
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
    # Beside the summary, as the project's quarantined_trips: a second query
    # over bronze that keeps the rows failing a check.
    quarantine = start_bounded(
        trips.filter("fare_amount < 0 OR PULocationID IS NULL"), out, "quarantine"
    )
    query = start_bounded(summary, out, "summary")
    for running in (query, quarantine):
        running.awaitTermination()
    return sum(p["numInputRows"] for p in query.recentProgress)


class ProjectPlan:
    """The project's own nodes and declared parameters, called by hand."""

    def __init__(self, project: Path) -> None:
        self.ingest_nodes, self.aggregate_nodes = node_modules(
            project, "ingest", "aggregate"
        )
        loader = config_loader(project)
        self.parameters = loader["parameters"]
        self.per_trigger = int(loader["globals"]["max_bytes_per_trigger"])

    def ingest(
        self, spark: SparkSession, landing: str, zones_csv: str, out: Path
    ) -> int:
        nodes = self.ingest_nodes
        raw = (
            spark.readStream.format("text")
            .option("maxBytesPerTrigger", self.per_trigger)
            .load(landing)
        )
        zones = spark.read.csv(zones_csv, header=True, schema=ZONE_SCHEMA)
        bronze = nodes.check_trips(
            nodes.parse_trips(raw), zones, self.parameters["trip_expectations"]
        )
        query = run_bounded(bronze, out, "bronze")
        return sum(p["numInputRows"] for p in query.recentProgress)

    def aggregate(self, spark: SparkSession, zones_csv: str, out: Path) -> int:
        nodes = self.aggregate_nodes
        bronze_path = str(out / "bronze")
        # As the project's dataset reads a sink: the schema of its committed files.
        bronze = (
            spark.readStream.schema(spark.read.parquet(bronze_path).schema)
            .option("maxBytesPerTrigger", self.per_trigger)
            .parquet(bronze_path)
        )
        zones = spark.read.csv(zones_csv, header=True, schema=ZONE_SCHEMA)
        quarantine = start_bounded(
            nodes.select_rejected_trips(bronze), out, "quarantine"
        )
        summary = nodes.summarise_hourly_by_borough(
            nodes.select_valid_trips(bronze), zones, self.parameters["summary"]
        )
        query = start_bounded(summary, out, "summary")
        for running in (query, quarantine):
            running.awaitTermination()
        return sum(p["numInputRows"] for p in query.recentProgress)


def start_bounded(frame: DataFrame, out: Path, name: str) -> StreamingQuery:
    """Starts appending ``frame`` to the parquet table ``out/name``, until the
    data available now is processed."""
    query = (
        frame.writeStream.format("parquet")
        .outputMode("append")
        .option("checkpointLocation", str(out / "checkpoints" / name))
        .trigger(availableNow=True)
        .start(str(out / name))
    )
    return query


def run_bounded(frame: DataFrame, out: Path, name: str) -> StreamingQuery:
    query = start_bounded(frame, out, name)
    query.awaitTermination()
    return query


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "project", type=Path, help="a generated project (its spark.yml and data)"
    )
    parser.add_argument("out", type=Path, help="where the tables and checkpoints go")
    parser.add_argument(
        "--stage", choices=("ingest", "aggregate", "all"), default="all"
    )
    parser.add_argument(
        "--plan",
        choices=("light", "project"),
        default="light",
        help="light: the typed read and one filter above; project: the "
        "project's own nodes and rules, by hand",
    )
    parser.add_argument(
        "--class-archive",
        type=Path,
        help="map this archive of Spark's classes (class-data sharing), as "
        "the project's runs do once they have recorded one",
    )
    args = parser.parse_args()

    spark_conf = yaml.safe_load((args.project / "conf/base/spark.yml").read_text())
    if args.class_archive:
        spark_conf["spark.driver.extraJavaOptions"] += (
            f" -XX:SharedArchiveFile={args.class_archive} -Xlog:cds*=off"
        )
    spark = SparkSession.builder.config(
        map={k: str(v) for k, v in spark_conf.items()}
    ).getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    raw = args.project / "data/01_raw"
    landing, zones = str(raw / "trips_landing"), str(raw / "taxi_zone_lookup.csv")
    plan = ProjectPlan(args.project) if args.plan == "project" else None
    for stage in ("ingest", "aggregate"):
        if args.stage in (stage, "all"):
            started = time.monotonic()
            if plan and stage == "ingest":
                rows = plan.ingest(spark, landing, zones, args.out)
            elif plan:
                rows = plan.aggregate(spark, zones, args.out)
            elif stage == "ingest":
                rows = ingest(spark, landing, args.out)
            else:
                rows = aggregate(spark, zones, args.out)
            print(f"{stage}: {rows} rows in {time.monotonic() - started:.2f} s")
    spark.stop()


if __name__ == "__main__":
    main()
