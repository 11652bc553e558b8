"""Runs ``kedro run`` with Spark's own instruments read from inside the run.

The project's python runs this file in place of ``kedro``; the arguments after
``--`` are the ``kedro`` command's. While the run runs, a thread reads, every
``--tick`` seconds, through the session's JVM:

- each streaming query's last planned batch (``lastExecution``): once it is
  planned, its ``QueryPlanningTracker`` (the phases' start and end; per rule
  of the analyser and the optimizer, its time, invocations and the
  invocations that changed the plan), read a few seconds later so that the
  reading does not fall in the pause it measures;
- Spark's code generation counters: the time spent generating whole-stage
  code (``WholeStageCodegenExec.codeGenTime``), compiling it
  (``CodeGenerator.compileTime``, cache misses only), and the number of
  classes compiled (``CodegenMetrics``' compilation-time histogram count).

What it read goes to ``--out`` as JSON when the run ends (``read_out``).

    python spark_instruments.py --out run.json -- run --env kafka --pipelines realtime
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

# A tracker is read this long after its batch was planned: long enough for
# the batch's tasks to be running, so that the ~500 JVM calls of a reading do
# not fall in the pause being measured.
READ_AFTER_S = 3.0
# The running queries are listed again this often (a query of a later node
# starts after the first).
QUERIES_EVERY_S = 2.0


class Instruments(threading.Thread):
    """Samples of Spark's planning and code generation in this process."""

    def __init__(self, tick: float) -> None:
        super().__init__(daemon=True, name="spark-instruments")
        self.tick = tick
        self.stopped = threading.Event()
        self.samples: list[list[float]] = []
        self.batches: list[dict] = []
        self._pending: dict[tuple[str, int], tuple[float, object]] = {}
        self._jvm = None
        self._counters: tuple | None = None
        self._queries: list = []
        self._queries_at = 0.0
        self._seen: set[tuple[str, int]] = set()

    def run(self) -> None:
        from pyspark.sql import SparkSession

        while not self.stopped.wait(self.tick):
            spark = SparkSession._instantiatedSession  # noqa: SLF001 (the run's own)
            if spark is None:
                continue
            try:
                self._sample(spark)
            except Exception:  # noqa: BLE001 (a session stopping as the run ends)
                if self.stopped.is_set():
                    return
        self._read_trackers(all_of_them=True)

    def _sample(self, spark) -> None:
        # Each JVM class and query looked up once: every call through py4j is
        # a round trip, and a tick of a dozen of them took a noticeable share
        # of the two cores the stream runs on.
        if self._counters is None:
            jvm = self._jvm = spark._jvm  # noqa: SLF001
            self._counters = (
                jvm.org.apache.spark.sql.execution.WholeStageCodegenExec,
                jvm.org.apache.spark.sql.catalyst.expressions.codegen.CodeGenerator,
                jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME(),
            )
        now = time.time()
        codegen, compiler, compiled = self._counters
        self.samples.append(
            [
                now,
                codegen.codeGenTime() / 1e6,
                compiler.compileTime() / 1e6,
                compiled.getCount(),
            ]
        )
        if now - self._queries_at > QUERIES_EVERY_S:
            self._queries = [
                (str(q.name()), q.streamingQuery())
                for q in spark._jsparkSession.streams().active()  # noqa: SLF001
            ]
            self._queries_at = now
        for name, query in self._queries:
            execution = query.lastExecution()
            if execution is None:
                continue
            key = (name, int(execution.currentBatchId()))
            if key in self._seen:
                continue
            tracker = execution.tracker()
            if tracker.phases().contains("planning"):
                self._seen.add(key)
                self._pending[key] = (now, tracker)
        self._read_trackers()

    def _read_trackers(self, all_of_them: bool = False) -> None:
        now = time.time()
        for key, (seen, tracker) in list(self._pending.items()):
            if not all_of_them and now - seen < READ_AFTER_S:
                continue
            del self._pending[key]
            try:
                self.batches.append(_tracker_record(self._jvm, key, seen, tracker))
            except Exception:  # noqa: BLE001, S112 (the JVM gone at the end)
                continue

    def result(self) -> dict:
        return {"samples": self.samples, "batches": self.batches}


def _tracker_record(jvm, key: tuple[str, int], seen: float, tracker) -> dict:
    """One planned batch's phases (epoch ms) and rules, from its tracker."""
    as_java = jvm.scala.jdk.javaapi.CollectionConverters.asJava
    phases = {
        str(name): [int(p.startTimeMs()), int(p.endTimeMs())]
        for name, p in as_java(tracker.phases()).items()
    }
    rules = [
        [
            str(name).rsplit(".", 1)[-1],
            int(r.totalTimeNs()),
            int(r.numInvocations()),
            int(r.numEffectiveInvocations()),
        ]
        for name, r in as_java(tracker.rules()).items()
    ]
    rules.sort(key=lambda rule: -rule[1])
    return {
        "query": key[0],
        "batch": key[1],
        "seen_at": seen,
        "phases": phases,
        "rules": rules,
    }


def read_out(path: Path) -> dict:
    """What a run under this file read (``samples``, ``batches``)."""
    return json.loads(path.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tick", type=float, default=0.1, help="seconds")
    parser.add_argument("kedro", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    kedro_args = args.kedro[1:] if args.kedro[:1] == ["--"] else args.kedro
    instruments = Instruments(args.tick)
    instruments.start()
    from kedro.framework.cli.cli import main as kedro_main

    sys.argv = ["kedro", *kedro_args]
    code: int | str | None = 0
    try:
        kedro_main()
    except SystemExit as end:
        code = end.code
    finally:
        instruments.stopped.set()
        instruments.join(timeout=60)
        args.out.write_text(json.dumps(instruments.result()))
    sys.exit(code)


if __name__ == "__main__":
    main()
