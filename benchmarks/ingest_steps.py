"""Where ingest's time goes: the bronze query built up step by step.

Each step runs in a fresh JVM (as a `kedro run` does) on the benchmark's
landing folder (run `batch.py` first), as one availableNow micro-batch to a
parquet sink, with the project's spark.yml, and prints the batch's duration:

- ``json_reader``: Spark's JSON reader with the typed schema, as the
  hand-written script does;
- ``from_json``: the same lines read as text and decoded with ``from_json``
  into the same schema, the least that turns every line into exactly one row;
- ``typed``: ``parse_trips`` without its ``raw_payload`` and provenance
  columns (Spark prunes them): lenient typing with named problems;
- ``parse``: the project's ``parse_trips`` (lenient typing, named problems,
  raw payload, provenance);
- ``zones``: ``check_trips`` with one rule that is always true: the zone
  lookup joins and the quarantine columns;
- ``rules``: ``check_trips`` with the 32 shipped rules, without their counts
  (the ``expectations`` metric);
- ``ingest``: ``check_trips(parse_trips(...))`` with the rules counted, the
  ``bronze_trips`` query.

    python benchmarks/ingest_steps.py [--rounds 2]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
STEPS = ("json_reader", "from_json", "typed", "parse", "zones", "rules", "ingest")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--workdir", type=Path, default=Path("/tmp/kedro-streaming-bench")
    )
    parser.add_argument("--step", choices=STEPS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    project = args.workdir / "bench-project"
    if args.step:
        print(run_step(project, args.step, args.workdir / "steps"))
        return

    python = args.workdir / "venv/bin/python"
    if not (project / "data/01_raw/trips_landing").is_dir() or not python.exists():
        sys.exit("No benchmark data: run benchmarks/batch.py first.")
    seconds: dict[str, list[str]] = {step: [] for step in STEPS}
    for _ in range(args.rounds):
        for step in STEPS:
            result = subprocess.run(
                [python, __file__, "--workdir", args.workdir, "--step", step],
                cwd=project,
                check=True,
                capture_output=True,
                text=True,
            )
            seconds[step].append(result.stdout.split()[-1])
            print(f"{step:12s} {seconds[step][-1]} s", flush=True)
    print("\nmicro-batch duration per round:")
    for step, runs in seconds.items():
        print(f"  {step:12s} {', '.join(runs)} s")


def run_step(project: Path, step: str, out: Path) -> str:
    """The step's query on a fresh session; the micro-batch's duration in s.

    Runs in the benchmark project's virtualenv, which has PySpark.
    """
    import shutil

    import yaml
    from kedro.config import OmegaConfigLoader
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    sys.path.insert(0, str(HERE))
    from handwritten import TRIP_SCHEMA, ZONE_SCHEMA, run_bounded

    spark_conf = yaml.safe_load((project / "conf/base/spark.yml").read_text())
    spark = SparkSession.builder.config(
        map={k: str(v) for k, v in spark_conf.items()}
    ).getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    package = next(p for p in (project / "src").iterdir() if (p / "streaming").is_dir())
    sys.path.insert(0, str(package.parent))
    nodes = __import__(f"{package.name}.pipelines.ingest.nodes", fromlist=["nodes"])

    raw = project / "data/01_raw"
    landing = str(raw / "trips_landing")
    lines = spark.readStream.format("text").load(landing)
    if step == "json_reader":
        trips = spark.readStream.schema(TRIP_SCHEMA).json(landing)
    elif step == "from_json":
        trips = lines.select(F.from_json("value", TRIP_SCHEMA).alias("trip"))
        trips = trips.select("trip.*")
    elif step == "typed":
        trips = nodes.parse_trips(lines).drop("raw_payload", *nodes.SOURCE_COLUMNS)
    elif step == "parse":
        trips = nodes.parse_trips(lines)
    else:
        zones = spark.read.csv(
            str(raw / "taxi_zone_lookup.csv"), header=True, schema=ZONE_SCHEMA
        )
        rules = OmegaConfigLoader(str(project / "conf"), base_env="base")
        expectations = rules["parameters"]["trip_expectations"]
        if step == "zones":
            expectations = {"always": {"expect": "true", "action": "quarantine"}}
        if step == "rules":  # the same query without the observed counts
            type(lines).observe = lambda frame, *_, **__: frame
        trips = nodes.check_trips(nodes.parse_trips(lines), zones, expectations)

    shutil.rmtree(out, ignore_errors=True)
    query = run_bounded(trips, out, "table")
    batch_ms = sum(p["durationMs"]["triggerExecution"] for p in query.recentProgress)
    spark.stop()
    return f"{batch_ms / 1000:.1f}"


if __name__ == "__main__":
    main()
