"""What a ``StreamTest`` is given: its target as a pipeline, the names of its
inputs and sinks checked, and its static values as DataFrames."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from kedro.pipeline import Node, Pipeline, node
from pyspark.sql import Row, SparkSession

from kedro_streaming._connectors.sink_args import OUTPUT_MODES


def as_pipeline(
    target: Callable[..., Any] | Node | Pipeline, given: set[str]
) -> Pipeline:
    """``target`` as a pipeline; a function's parameters are its input names,
    those with a default only if ``given``."""
    if isinstance(target, Pipeline):
        return target
    if isinstance(target, Node):
        return Pipeline([target])
    names = [
        name
        for name, parameter in inspect.signature(target).parameters.items()
        if parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)
        and (parameter.default is parameter.empty or name in given)
    ]
    return Pipeline(
        [node(target, {name: name for name in names}, f"{target.__name__}_output")]
    )


def check_names(
    pipeline: Pipeline,
    streams: Mapping[str, Any],
    static: Mapping[str, Any],
    modes: Mapping[str, str],
) -> None:
    """Raises ``ValueError`` for an input given no value, a stream that is no
    input of ``pipeline`` and an output mode Spark does not have."""
    needed = pipeline.inputs()
    missing = sorted(needed - set(streams) - set(static))
    if missing:
        raise ValueError(
            f"No value for inputs {missing}: give each in `streams` "
            "(a schema) or `static` (a value)"
        )
    extra = sorted(set(streams) - needed)
    if extra:
        raise ValueError(f"{extra} are not inputs of {pipeline}")
    bad = {sink: mode for sink, mode in modes.items() if mode not in OUTPUT_MODES}
    if bad:
        raise ValueError(f"Output modes {bad}: each must be one of {OUTPUT_MODES}")


def as_frame(spark: SparkSession, value: Any) -> Any:
    """A pandas DataFrame or a list of dicts or ``Row``s as a DataFrame; any
    other value as is (a parameter)."""
    pandas = type(value).__module__.startswith("pandas") and hasattr(value, "columns")
    if pandas or (
        isinstance(value, list)
        and value
        and all(isinstance(row, dict | Row) for row in value)
    ):
        return spark.createDataFrame(value)
    return value
