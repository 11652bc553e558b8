"""Where ingest's time goes: the bronze query built up step by step.

Each step reads the benchmark's landing folder (run `batch.py` first) with
the project's spark.yml:

- ``json_reader``: Spark's JSON reader with the typed schema, as the
  hand-written script does;
- ``from_json``: the same lines read as text and decoded with ``from_json``
  into the same schema, the least that turns every line into exactly one row;
- ``typed``: ``parse_trips`` without its ``raw_payload`` and provenance
  columns (Spark prunes them): lenient typing with named problems;
- ``parse``: the project's ``parse_trips`` (lenient typing, named problems,
  raw payload, provenance);
- ``zones``: ``check_trips`` with one rule that is always true: the zone
  lookups and the quarantine columns;
- ``rules``: ``check_trips`` with the 32 shipped rules, without their counts
  (the ``expectations`` metric);
- ``ingest``: ``check_trips(parse_trips(...))`` with the rules counted, the
  ``bronze_trips`` query.

By default each step runs in a fresh JVM (as a `kedro run` does), as one
availableNow micro-batch to a parquet sink, and prints the batch's duration.
With ``--one-jvm``, the steps alternate in one warm session, round after
round, each read as a batch and written to Spark's ``noop`` sink, which
consumes every row and writes nothing: the work per record alone, with the
JVM's warm-up and the disk left out (the first round is not counted).
``--jfr FILE`` records that session with the JVM's Flight Recorder, to read
with its own tool: ``jfr view hot-methods FILE`` (Java 21 and later; it reads
a recording of Java 17).

    python benchmarks/ingest_steps.py [--rounds 2] [--one-jvm [--steps a,b] [--jfr FILE]]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
STEPS = ("json_reader", "from_json", "typed", "parse", "zones", "rules", "ingest")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--one-jvm",
        action="store_true",
        help="alternate the steps in one session, batch reads, noop sink",
    )
    parser.add_argument(
        "--steps", default=",".join(STEPS), help="with --one-jvm: which, in turn"
    )
    parser.add_argument(
        "--jfr", type=Path, help="with --one-jvm: a Flight Recording of the session"
    )
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
    if args.one_jvm:
        # In the project's virtualenv, which has its PySpark and package.
        steps = args.steps.split(",")
        if unknown := set(steps) - set(STEPS):
            sys.exit(
                f"No such step: {', '.join(unknown)}; the steps: {', '.join(STEPS)}"
            )
        recording = str(args.jfr.resolve()) if args.jfr else ""
        subprocess.run(
            [python, "-c", _ONE_JVM, str(project), str(args.rounds), *steps],
            cwd=project,
            check=True,
            env={**os.environ, "INGEST_STEPS_JFR": recording},
        )
        return
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


_ONE_JVM = f"""
import sys
sys.path.insert(0, {str(HERE)!r})
from ingest_steps import alternate
alternate(__import__("pathlib").Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3:])
"""


def session(project: Path, recording: str = ""):
    """The project's SparkSession (its spark.yml) and its ingest nodes;
    the driver's JVM recorded into ``recording`` if given."""
    import yaml
    from pyspark.sql import SparkSession

    spark_conf = yaml.safe_load((project / "conf/base/spark.yml").read_text())
    if recording:
        spark_conf["spark.driver.extraJavaOptions"] = (
            f"{spark_conf.get('spark.driver.extraJavaOptions', '')} "
            f"-XX:StartFlightRecording=filename={recording},settings=profile"
        )
    spark = SparkSession.builder.config(
        map={k: str(v) for k, v in spark_conf.items()}
    ).getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    package = next(p for p in (project / "src").iterdir() if (p / "pipelines").is_dir())
    sys.path.insert(0, str(package.parent))
    nodes = __import__(f"{package.name}.pipelines.ingest.nodes", fromlist=["nodes"])
    return spark, nodes


def step_frame(spark, nodes, project: Path, step: str, streaming: bool):
    """The step's DataFrame over the landing folder, a stream or a batch."""
    from kedro.config import OmegaConfigLoader
    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F

    sys.path.insert(0, str(HERE))
    from handwritten import TRIP_SCHEMA, ZONE_SCHEMA

    raw = project / "data/01_raw"
    landing = str(raw / "trips_landing")
    reader = spark.readStream if streaming else spark.read
    lines = reader.format("text").load(landing)
    if step == "json_reader":
        return reader.schema(TRIP_SCHEMA).json(landing)
    if step == "from_json":
        trips = lines.select(F.from_json("value", TRIP_SCHEMA).alias("trip"))
        return trips.select("trip.*")
    if step == "typed":
        return nodes.parse_trips(lines).drop("raw_payload", *nodes.SOURCE_COLUMNS)
    if step == "parse":
        return nodes.parse_trips(lines)
    zones = spark.read.csv(
        str(raw / "taxi_zone_lookup.csv"), header=True, schema=ZONE_SCHEMA
    )
    rules = OmegaConfigLoader(str(project / "conf"), base_env="base")
    expectations = rules["parameters"]["trip_expectations"]
    if step == "zones":
        expectations = {"always": {"expect": "true", "action": "quarantine"}}
    observe = DataFrame.observe
    if step == "rules":  # the same query without the observed counts
        DataFrame.observe = lambda frame, *_, **__: frame
    try:
        return nodes.check_trips(nodes.parse_trips(lines), zones, expectations)
    finally:
        DataFrame.observe = observe


def run_step(project: Path, step: str, out: Path) -> str:
    """The step's query on a fresh session; the micro-batch's duration in s.

    Runs in the benchmark project's virtualenv, which has PySpark.
    """
    sys.path.insert(0, str(HERE))
    from handwritten import run_bounded

    spark, nodes = session(project)
    trips = step_frame(spark, nodes, project, step, streaming=True)
    shutil.rmtree(out, ignore_errors=True)
    query = run_bounded(trips, out, "table")
    batch_ms = sum(p["durationMs"]["triggerExecution"] for p in query.recentProgress)
    spark.stop()
    return f"{batch_ms / 1000:.1f}"


def alternate(project: Path, rounds: int, steps: list[str]) -> None:
    """The steps in turn, ``rounds`` times after one uncounted round, in one
    session; prints each time and the medians."""
    spark, nodes = session(project, os.environ.get("INGEST_STEPS_JFR", ""))
    seconds: dict[str, list[float]] = {step: [] for step in steps}
    for counted in range(rounds + 1):
        for step in steps:
            frame = step_frame(spark, nodes, project, step, streaming=False)
            started = time.monotonic()
            frame.write.format("noop").mode("overwrite").save()
            elapsed = time.monotonic() - started
            print(f"round {counted} {step:12s} {elapsed:6.2f} s", flush=True)
            if counted:
                seconds[step].append(elapsed)
    print("\nseconds per round, and the median:")
    for step, runs in seconds.items():
        times = ", ".join(f"{t:.2f}" for t in runs)
        print(f"  {step:12s} {times}   median {statistics.median(runs):.2f}")
    spark.stop()


if __name__ == "__main__":
    main()
