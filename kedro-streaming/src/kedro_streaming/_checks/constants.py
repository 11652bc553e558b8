"""Constants of a query's plan that Spark cannot compute: a parameter's word
where a number goes (``max_avg_temperature_c: thirty``, compared with a
double), found before any query starts.

Spark folds such a constant when it optimizes the plan, that is at a
query's first micro-batch, after the queries before it have written their
batch: ``F.lit("thirty")`` compared with a DOUBLE column is
``cast('thirty' as double)``, which ANSI mode (Spark 4's default) refuses.
Spark's own folding is applied to the analysed plan here, before any query
starts.
"""

from __future__ import annotations

from typing import Any

from kedro.io import DataCatalog
from kedro.pipeline import Pipeline

from kedro_streaming._checks.plans import Plans, _leaves, raise_problems
from kedro_streaming._spark import (
    headline,
    java_frame,
    jvm_of,
    pyspark_error_logs_off,
)


def constant_failures(spark: Any, frame: Any) -> list[str]:
    """Spark's error for the constant of ``frame``'s analysed plan that fails
    when Spark's optimizer folds it (none over Spark Connect): its own rule,
    ConstantFolding, applied to the plan, which computes each constant as a
    query's first batch will (not those of a conditional branch)."""
    frame_jvm, jvm = java_frame(frame), jvm_of(spark)
    if jvm is None or frame_jvm is None:
        return []
    with pyspark_error_logs_off():
        try:
            folding = getattr(
                getattr(
                    jvm.org.apache.spark.sql.catalyst.optimizer, "ConstantFolding$"
                ),
                "MODULE$",
            )
            folding.apply(frame_jvm.queryExecution().analyzed())
        except Exception as error:  # noqa: BLE001 (PySpark's or Py4J's, any cause)
            # A value Spark refuses (SQLSTATE class 22: a cast, a division by
            # zero, an overflow), not an expression that only the optimizer
            # replaces before it is computed.
            if _sql_state(error).startswith("22"):
                return [headline(error)]
    return []


def _sql_state(error: BaseException) -> str:
    """The SQLSTATE of a Spark error ("" if none): PySpark's, or the JVM's
    behind a Py4J error."""
    for source in (error, getattr(error, "java_exception", None)):
        try:
            state = source.getSqlState() if source is not None else None
        except Exception:  # noqa: BLE001 (not a SparkThrowable)
            state = None
        if state:
            return str(state)
    return ""


def add_constant_problems(
    spark: Any, catalog: DataCatalog, pipeline: Pipeline, plans: Plans
) -> None:
    """Adds a problem to ``plans`` for each query whose plan holds a constant
    Spark cannot compute, naming the node that makes the query's DataFrame
    and the parameter whose value the error quotes; the query's plan is then
    no longer among ``plans.frames``."""
    producers = {output: node for node in pipeline.nodes for output in node.outputs}
    for name, frame in list(plans.frames.items()):
        failures = constant_failures(spark, frame)
        if not failures:
            continue
        node = producers.get(name)
        parameters = _parameters_before(catalog, pipeline, name)
        for failure in failures:
            named = [
                key
                for key, value in parameters
                if len(value.strip()) > 2 and f"'{value}'" in failure
            ]
            where = f" (the value of {', '.join(named)})" if named else ""
            fix = (
                f"in conf/<env>/parameters*.yml, give {named[0]} a value of the "
                "type Spark casts it to"
                if named
                else "the node's constant, which Spark would compute at the "
                "query's first batch"
            )
            plans.problems.append(
                f"query {name} (node {node.name if node else name}): {failure}"
                f"{where}. Fix: {fix}"
            )
        del plans.frames[name]


def _parameters_before(
    catalog: DataCatalog, pipeline: Pipeline, sink: str
) -> list[tuple[str, str]]:
    """The text values of the parameters the nodes making ``sink`` read, by
    their dotted names (``params:alerts.max_avg_temperature_c``)."""
    names = {
        name
        for node in pipeline.to_outputs(sink).nodes
        for name in node.inputs
        if name.startswith("params:") or name == "parameters"
    }
    values = []
    for name in sorted(names):
        try:
            value = catalog.load(name)
        except Exception:  # noqa: BLE001 (nothing to name then)
            continue
        values += [
            (key, leaf) for key, leaf in _leaves(name, value) if isinstance(leaf, str)
        ]
    return values


def check_constants(
    spark: Any, catalog: DataCatalog, pipeline: Pipeline, plans: Plans
) -> None:
    """:func:`add_constant_problems`, failing on any, as ``check_plans`` fails.

    Raises:
        StreamingConfigError: A query's plan holds a constant Spark refuses.
    """
    add_constant_problems(spark, catalog, pipeline, plans)
    raise_problems(plans)
