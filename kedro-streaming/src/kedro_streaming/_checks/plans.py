"""A dry run: every streaming query of a run built and checked before any starts.

``kedro run`` does it first and ``kedro streams validate`` is it, so a node or
parameter mistake is one line, before anything is written or read. The run
then starts the DataFrames it checked (``Plans.replay``): each node runs once.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pyspark
from kedro.io import DataCatalog
from kedro.io.core import DatasetError
from kedro.pipeline import Node, Pipeline
from pyspark.errors import AnalysisException
from pyspark.sql import functions as F

from kedro_streaming._checks.describe import ends_by_itself
from kedro_streaming._checks.realtime import real_time_plan_problem
from kedro_streaming._checks.resume import Verdict, resume_verdict
from kedro_streaming._checks.spec import RunSpec, sink_read_as
from kedro_streaming._checks.stateful import (
    missing_api_problem,
    redefined_watermark_problem,
    transform_with_state_problem,
    unwatermarked_join_note,
)
from kedro_streaming._checks.watermarks import (
    inherited_watermark_problem,
    union_watermark_note,
)
from kedro_streaming._connectors.streams import names_sources, source_name
from kedro_streaming._dataset import SparkStreamingDataset
from kedro_streaming._spark import (
    headline,
    java_frame,
    jvm_of,
    pyspark_error_logs_off,
)
from kedro_streaming.errors import StreamingConfigError

# Named as before 0.7.0: projects' logging.yml may set its level.
logger = logging.getLogger("kedro_streaming.plans")

# What a stream over a sink with nothing committed yet says, over Spark
# Connect (classic Spark says it when the stream is made: a DatasetError).
_NOTHING_YET = ("PATH_NOT_FOUND", "UNABLE_TO_INFER_SCHEMA", "DELTA_SCHEMA_NOT_SET")

# What a node's run logs itself, and each load: the dry run reports a
# failure once, as its own line, and a real run's log shows its loads once.
_QUIET_LOGGERS = ("kedro.pipeline.node", "kedro.io.data_catalog")


@dataclass
class Plans:
    """The dry run's outcome.

    Attributes:
        frames: Each sink's DataFrame Spark would start, in node order.
        stand_ins: The sinks among ``frames`` built on a stand-in for a sink
            of this run (see ``_input``).
        notes: Changes a query may make, said before it starts (a new column).
        returned: What each node not built on a stand-in returned.
        verdicts: What starting each sink's query does to its checkpoint.
    """

    frames: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    stand_ins: set[str] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)
    returned: dict[Node, Any] = field(default_factory=dict)
    verdicts: dict[str, Verdict] = field(default_factory=dict)

    def replay(self) -> Callable[[], None]:
        """Makes each node in ``returned`` return its dry-run result on its
        next call, so no node runs twice; returns what puts them back."""
        originals = {node: node.func for node in self.returned}

        def put_back() -> None:
            for node, func in originals.items():
                _set_func(node, func)

        for node, returned in self.returned.items():
            _set_func(node, _once(node, returned))
        return put_back


def build_plans(
    spark: Any,
    run: RunSpec,
    sinks: dict[str, SparkStreamingDataset] | None = None,
    *,
    bounded: bool | None = None,
) -> Plans:
    """Runs the nodes that make ``sinks`` (the run's by default) on dry inputs
    and checks each sink's DataFrame; a failed node's successors are skipped.
    ``bounded``: every query gets an ``availableNow`` trigger."""
    catalog, pipeline = run.catalog, run.pipeline
    sinks = run.sinks if sinks is None else sinks
    bounded = run.bounded if bounded is None else bounded
    plans = Plans()
    frames: dict[str, Any] = {}
    failed: set[str] = set()
    standing: set[str] = set()  # DataFrames built on a stand-in
    needed = pipeline.to_outputs(*sinks).nodes if sinks else []
    for node in needed:  # in the order Kedro runs them
        if failed & set(node.inputs):
            failed |= set(node.outputs)
            continue
        inputs: dict[str, Any] = {}
        try:
            # The error is said once, below: not by PySpark's loggers too.
            with _quiet(), pyspark_error_logs_off():
                for name in node.inputs:
                    inputs[name] = _input(spark, catalog, sinks, frames, name)
                returned, outputs = _run_recorded(node, inputs)
        except Exception as error:  # a node's own error, reported with its query
            failed |= set(node.outputs)
            queries = _queries_of(pipeline, sinks, node.outputs)
            plans.problems.append(
                f"query {', '.join(queries or node.outputs)}: node {node.name} "
                f"fails: {node_failure(error, inputs)}"
            )
            continue
        frames.update(outputs)
        if any(
            name in standing or name in sinks or sink_read_as(name, sinks)
            for name in node.inputs
        ):
            standing |= set(outputs)
        elif not inspect.isgenerator(returned):  # a generator is spent
            plans.returned[node] = returned
        for name in sorted(set(outputs) & set(sinks)):
            problem = sink_plan_problem(
                spark, sinks[name], outputs[name], plans, name, bounded=bounded, run=run
            )
            if problem:
                plans.problems.append(f"query {name} (node {node.name}): {problem}")
                continue
            plans.frames[name] = outputs[name]
            if name in standing:
                plans.stand_ins.add(name)
    return plans


def check_plans(spark: Any, run: RunSpec) -> Plans:
    """``build_plans``, its notes logged, failing on any problem: one line each."""
    plans = build_plans(spark, run)
    for note in plans.notes:  # said whether the run goes on or not
        logger.warning("%s.", note)
    raise_problems(plans)
    return plans


def raise_problems(plans: Plans) -> None:
    """Raises ``StreamingConfigError`` if ``plans`` has problems, one line each."""
    if plans.problems:
        raise StreamingConfigError(
            "Streaming queries cannot start as the pipeline's nodes build them "
            "(`kedro streams validate` lists the same):\n"
            + "\n".join(
                "  - " + problem.replace("\n", "\n    ") for problem in plans.problems
            )
        )


def sink_plan_problem(  # noqa: PLR0913 (the sink, its plan, and the run's)
    spark: Any,
    dataset: SparkStreamingDataset,
    frame: Any,
    plans: Plans,
    name: str,
    *,
    bounded: bool = False,
    run: RunSpec,
) -> str | None:
    """What Spark would refuse when starting the sink's query, or a change
    its checkpoint cannot resume (``resume_verdict``); ``None`` if nothing
    (notes and the verdict go to ``plans``). Every check of a sink's
    DataFrame belongs here."""
    try:
        frame.schema  # noqa: B018 (analyses the plan, also over Spark Connect)
    except Exception as error:
        return headline(error)
    problems = dataset.data_problems(frame)
    if problems:
        return problems[0]
    if dataset.real_time:
        problem = real_time_plan_problem(frame, spark.version)
        if problem:
            return problem
    problem = _output_mode_problem(spark, dataset.output_mode, frame)
    if problem:
        return problem
    ends = bounded or ends_by_itself(dataset.trigger)
    problem = (
        transform_with_state_problem(spark, frame, bounded=ends)
        or redefined_watermark_problem(spark, frame)
        or inherited_watermark_problem(frame)
    )
    if problem:
        return problem
    for note in (unwatermarked_join_note(frame), union_watermark_note(frame)):
        if note:
            plans.notes.append(f"'{name}' {note}")
    verdict = resume_verdict(
        name, dataset, frame, run.sources_of(name), project=run.project_path
    )
    plans.verdicts[name] = verdict
    plans.notes += [f"'{name}' {note}" for note in verdict.notes]
    return f"'{name}' {verdict.reasons[0]}." if verdict.reasons else None


def _output_mode_problem(spark: Any, mode: str, frame: Any) -> str | None:
    """What Spark's check of a streaming plan against its output mode (made
    when a query starts) refuses; over Spark Connect Spark checks at start."""
    jvm = jvm_of(spark)
    if jvm is None:
        return None
    checking = spark.conf.get("spark.sql.streaming.unsupportedOperationCheck", "true")
    if checking.strip().lower() == "false":  # Spark would not check it either
        return None
    modes = jvm.org.apache.spark.sql.streaming.OutputMode
    analysis = jvm.org.apache.spark.sql.catalyst.analysis
    try:
        analysis.UnsupportedOperationChecker.checkForStreaming(
            java_frame(frame).queryExecution().analyzed(),
            {
                "append": modes.Append,
                "update": modes.Update,
                "complete": modes.Complete,
            }[mode](),
        )
    except Exception as error:
        problem = headline(error)
        if "aggregations without watermark" in problem:
            problem += (
                " Fix: in the node, `.withWatermark(<event-time column>, "
                "<delay>)` before the aggregation (append writes a window once "
                "the watermark passes it), or give the sink `output_mode: update`"
                " or `complete`"
            )
        return problem
    return None


def node_failure(error: BaseException, inputs: dict[str, Any]) -> str:
    """A node's failure in one line: the configuration error behind it if
    any, and the parameter whose value the message quotes."""
    missing = missing_api_problem(error, pyspark.__version__)
    if missing:
        return missing
    cause = headline(_configuration_cause(error))
    named = [
        key
        for name, value in inputs.items()
        if name.startswith("params:") or name == "parameters"
        for key, leaf in _leaves(name, value)
        if isinstance(leaf, str)
        and len(leaf.strip()) > 2
        and any(f"{quote}{leaf}{quote}" in cause for quote in "'\"`")
    ]
    if named:
        cause += f" (the value of {', '.join(named)})"
        if "CANNOT_PARSE_INTERVAL" in cause:
            cause += (
                f". Fix: give {named[0]} an interval Spark reads, e.g. '10 "
                "minutes', '30 seconds' or '1 hour', in conf/<env>/parameters*.yml"
            )
    return cause


def _leaves(key: str, value: Any) -> Iterator[tuple[str, Any]]:
    """Each value of a parameter, by its dotted name (params:summary.watermark_delay)."""
    if isinstance(value, dict):
        for child, inner in value.items():
            name = f"params:{child}" if key == "parameters" else f"{key}.{child}"
            yield from _leaves(name, inner)
    else:
        yield key, value


def _configuration_cause(error: BaseException) -> BaseException:
    """The configuration error behind ``error``, else the dataset's own error
    behind Kedro's "Failed while loading data from dataset ..." (too long)."""
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, StreamingConfigError):
            return cause
        cause = cause.__cause__ or cause.__context__
    if isinstance(error, DatasetError) and error.__cause__ is not None:
        return error.__cause__
    return error


def _input(
    spark: Any,
    catalog: DataCatalog,
    sinks: dict[str, SparkStreamingDataset],
    frames: dict[str, Any],
    name: str,
) -> Any:
    """A node's dry-run input: a DataFrame built earlier, a stream over a sink
    of this run (a stand-in with its columns while it has nothing yet: the run
    reads files, not the writer's plan), or the catalog's."""
    written = sink_read_as(name, sinks)
    if written is not None and written in frames:
        return _table_of(catalog, sinks[written], frames[written], name)
    if name not in frames:
        return catalog.load(name)
    if name not in sinks:
        return frames[name]
    dataset, frame = sinks[name], frames[name]
    own_schema = not dataset.connector.takes_schema
    try:
        stream = dataset.stream(schema=None if own_schema else frame.schema)
        stream.schema  # noqa: B018 (Spark Connect looks at the folder only now)
    except DatasetError:
        return _stream_like(spark, frame, name)
    except AnalysisException as error:
        if not any(cause in str(error) for cause in _NOTHING_YET):
            raise
        return _stream_like(spark, frame, name)
    return stream


def _table_of(
    catalog: DataCatalog, sink: SparkStreamingDataset, frame: Any, name: str
) -> Any:
    """A sink of this run read as a table under another name (``name``): the
    table, or while there is none, an empty one of the columns its query will
    give it (the run holds the read back until the query has written)."""
    try:
        table = catalog.load(name)
        table.schema  # noqa: B018 (Spark Connect looks at the folder only now)
    except (DatasetError, AnalysisException):
        schema = sink.connector.table_schema(sink, frame.schema)
        return frame.sparkSession.createDataFrame([], schema)
    return table


def _stream_like(spark: Any, frame: Any, name: str) -> Any:
    """A streaming DataFrame with ``frame``'s columns, nothing behind them,
    standing for the stream over sink ``name`` (named so, when Spark names
    sources)."""
    # One null cast to the whole row, then its fields: a cast per column was
    # four calls into the JVM each, 0.34 s for the example's two stand-ins.
    empty = F.lit(None).cast(frame.schema).alias("_row")
    reader = spark.readStream.format("rate")
    if names_sources(spark):
        reader = reader.name(source_name(name))
    return reader.load().select(empty).select("_row.*")


def _run_recorded(node: Node, inputs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """``node.run(inputs)``, and what its function returned."""
    func = node.func
    returned: list[Any] = []

    @functools.wraps(func)
    def recording(*args: Any, **kwargs: Any) -> Any:
        returned.append(func(*args, **kwargs))
        return returned[0]

    _set_func(node, recording)  # Kedro's way to wrap a node's function
    try:
        outputs = node.run(inputs)
    finally:
        _set_func(node, func)
    return returned[0], outputs


def _once(node: Node, returned: Any) -> Callable[..., Any]:
    """A node's function that returns ``returned`` once, then is itself again."""
    func = node.func

    @functools.wraps(func)
    def replayed(*args: Any, **kwargs: Any) -> Any:
        _set_func(node, func)
        return returned

    return replayed


def _set_func(node: Node, func: Callable[..., Any]) -> None:
    # Kedro's setter deletes the node's cached inputs, which must be there
    # (a node whose inputs nothing read since has none cached).
    node.inputs  # noqa: B018
    node.func = func


def _queries_of(
    pipeline: Pipeline, sinks: dict[str, SparkStreamingDataset], outputs: list[str]
) -> list[str]:
    """The sinks whose queries need any of ``outputs``, even indirectly."""
    return [
        sink for sink in sinks if set(outputs) & pipeline.to_outputs(sink).all_outputs()
    ]


@contextmanager
def _quiet() -> Iterator[None]:
    loggers = [logging.getLogger(name) for name in _QUIET_LOGGERS]
    levels = [each.level for each in loggers]
    for each in loggers:
        each.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for each, level in zip(loggers, levels, strict=True):
            each.setLevel(level)
