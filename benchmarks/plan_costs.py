"""What planning one batch of a query costs, warmed up, phase by phase.

Builds a pipeline's queries in a project as ``kedro run`` would (its
SparkSession and spark.yml of ``--env``, its catalog's sources, its nodes),
with each streaming source standing in as an empty parquet relation of its
schema, then plans each query's DataFrame ``--times`` times in the same JVM, as Spark
plans every batch of a stream again: analysis, optimization (per rule),
physical planning, and whole-stage code generation (``debug.codegenToSeq``,
the compiling from Spark's cache as a checkpoint's does). Prints the median of
each over the last half of the rounds, and the plan's size. Quick enough to
run between changes to a node or to ``check_expectations``; the pauses of a
real run are ``realtime_latency.py``'s.

    cd <project> && python plan_costs.py --env kafka --pipelines realtime [--times 40]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from breakdown import TOP_RULES, phase_times


def built_queries(env: str, pipelines: list[str]) -> tuple[object, dict]:
    """The SparkSession of a run in ``env``, and each sink's DataFrame of
    ``pipelines``, by the sink's name."""
    from kedro.framework.project import pipelines as registry
    from kedro.framework.session import KedroSession
    from kedro.framework.startup import bootstrap_project

    bootstrap_project(Path.cwd())
    catalog = KedroSession.create(env=env).load_context().catalog
    pipeline = sum((registry[name] for name in pipelines), start=registry[pipelines[0]])
    return run_nodes(catalog, pipeline)


def run_nodes(catalog, pipeline) -> tuple[object, dict]:
    """The nodes of ``pipeline`` run on ``catalog``'s inputs, each streaming
    source standing in as an empty parquet relation of its schema: the
    session, and each output no node reads, by name."""
    from pyspark.sql import DataFrame, SparkSession

    values: dict[str, object] = {}
    spark = None
    for name in pipeline.inputs():
        values[name] = catalog.load(name)
        if isinstance(values[name], DataFrame) and values[name].isStreaming:
            # Spark plans a stream's batch only inside the running query:
            # the source becomes a file relation of its schema (no rows), on
            # which the nodes build the same expressions.
            spark = values[name].sparkSession
            stand_in = Path(f"/tmp/plan-costs-{name}")
            spark.createDataFrame([], values[name].schema).write.mode(
                "overwrite"
            ).parquet(str(stand_in))
            values[name] = spark.read.parquet(str(stand_in))
    for node in pipeline.nodes:
        values.update(node.run({name: values[name] for name in node.inputs}))
    frames = {
        name: frame
        for name, frame in values.items()
        if isinstance(frame, DataFrame)
        and name in pipeline.all_outputs() - pipeline.all_inputs()
    }
    return spark or SparkSession.getActiveSession(), frames


def plan_once(spark, frame) -> dict:
    """One planning of ``frame``'s plan from analysis to generated code (ms)."""
    jvm = spark._jvm  # noqa: SLF001
    codegen = jvm.org.apache.spark.sql.execution.WholeStageCodegenExec
    execution = frame._jdf.alias("_planned").queryExecution()  # noqa: SLF001
    before = codegen.codeGenTime()
    started = time.perf_counter()
    execution.executedPlan()
    planned = time.perf_counter()
    execution.debug().codegenToSeq()
    generated = time.perf_counter()
    as_java = jvm.scala.jdk.javaapi.CollectionConverters.asJava
    phases = {
        str(name): [int(p.startTimeMs()), int(p.endTimeMs())]
        for name, p in as_java(execution.tracker().phases()).items()
    }
    rules = {
        str(name).rsplit(".", 1)[-1]: [
            int(r.totalTimeNs()),
            int(r.numEffectiveInvocations()),
        ]
        for name, r in as_java(execution.tracker().rules()).items()
    }
    return {
        **phase_times(phases),
        "to executed plan": 1000 * (planned - started),
        "code generation": 1000 * (generated - planned),
        "of which generating": (codegen.codeGenTime() - before) / 1e6,
        "rules": rules,
        "plan characters": len(execution.optimizedPlan().toString()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="base")
    parser.add_argument("--pipelines", default="__default__")
    parser.add_argument("--times", type=int, default=40)
    args = parser.parse_args()
    spark, frames = built_queries(args.env, args.pipelines.split(","))
    for name, frame in frames.items():
        rounds = [plan_once(spark, frame) for _ in range(args.times)]
        warm = rounds[len(rounds) // 2 :]
        keys = [k for k in warm[0] if k not in ("rules", "plan characters")]
        medians = {k: statistics.median(r[k] for r in warm) for k in keys}
        print(
            f"{name}: "
            + ", ".join(f"{k} {v:.1f}" for k, v in medians.items())
            + f" ms (median of the last {len(warm)} of {len(rounds)}); "
            f"optimized plan {warm[-1]['plan characters']:,} characters"
        )
        rule_ms = {
            rule: statistics.median(r["rules"].get(rule, [0, 0])[0] for r in warm) / 1e6
            for rule in warm[-1]["rules"]
        }
        idle = [
            rule for rule, (_, effective) in warm[-1]["rules"].items() if not effective
        ]
        slowest = sorted(rule_ms.items(), key=lambda item: -item[1])[: TOP_RULES * 2]
        print(
            "  rules: "
            + ", ".join(f"{rule} {ms:.2f}" for rule, ms in slowest)
            + f"; {len(idle)} of {len(rule_ms)} changed nothing, "
            f"{sum(rule_ms[r] for r in idle):.1f} ms"
        )


if __name__ == "__main__":
    main()
