"""What is checked before any query of a run starts."""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from kedro.config import MissingConfigException
from pyspark.sql import SparkSession

from kedro_streaming._checks.catalog import (
    all_pipelines,
    check_catalog_has,
    check_entries_named_as_used,
    check_paths_reach_the_cluster,
    check_paths_resolve_in_the_project,
    check_streams_have_sinks,
    dataset_paths,
    loader_like,
)
from kedro_streaming._checks.planner_warmup import planner_warm_up
from kedro_streaming._checks.realtime import (
    check_real_time,
    check_real_time_intervals,
    check_real_time_task_slots,
)
from kedro_streaming._checks.spec import RunSpec, run_trigger
from kedro_streaming._connectors.base import RunEntries
from kedro_streaming._connectors.entry_keys import misspelt_args
from kedro_streaming._connectors.files import normal_path
from kedro_streaming._connectors.options import (
    INTERVAL_TRIGGERS,
    OptionNames,
    interval_problem,
    option_problems,
)
from kedro_streaming._connectors.registry import CONNECTORS
from kedro_streaming._dataset import SparkStreamingDataset
from kedro_streaming._observe.endpoint import metrics_endpoint
from kedro_streaming._observe.metrics import check_port_free
from kedro_streaming._observe.state import SETTING_NAMES
from kedro_streaming._session.session import spark_location
from kedro_streaming.errors import StreamingConfigError
from kedro_streaming.problems import did_you_mean

# Named as before 0.7.0: projects' logging.yml may set its level.
logger = logging.getLogger("kedro_streaming.checks")


def check_settings(settings: dict[str, Any]) -> None:
    """Fails on a ``streaming.yml`` setting the runtime does not read (a
    misspelt one would leave the default in force without a word)."""
    unknown = sorted(set(settings) - set(SETTING_NAMES))
    if unknown:
        lines = [f"'{name}'" + _meant(name, SETTING_NAMES) for name in unknown]
        raise StreamingConfigError(
            "streaming.yml sets what the runtime does not read:\n  - "
            + "\n  - ".join(lines)
            + f"\nIts settings: {', '.join(SETTING_NAMES)}."
        )


def check_runtime_params(config_loader: Any) -> None:
    """Fails on a ``--params`` name that nothing in the project reads: not a
    parameter, not a setting of ``streaming.yml``, not a
    ``${runtime_params:...}`` of any configuration file. Kedro would take it
    without a word, and the run would go on as if it had not been given
    (``--params triger=available_now`` would run unbounded)."""
    runtime = getattr(config_loader, "runtime_params", None) or {}
    if not runtime:
        return
    # The parameters as declared: the run's loader has --params merged in.
    try:
        parameters = loader_like(config_loader, runtime_params={})["parameters"]
    except MissingConfigException:
        parameters = {}
    except Exception:  # noqa: BLE001 (one that needs --params: no check then)
        return
    referenced = set()
    root = Path(str(config_loader.conf_source))
    for path in root.rglob("*") if root.is_dir() else []:
        if path.suffix in {".yml", ".yaml", ".json"} and path.is_file():
            referenced.update(
                re.findall(
                    r"runtime_params:\s*([A-Za-z_][\w-]*)",
                    path.read_text(errors="replace"),
                )
            )
    known = sorted(set(parameters) | set(SETTING_NAMES) | referenced)
    unknown = [(name, known) for name in runtime if name not in known]
    # `--params group.key=...` comes nested: a key its group does not declare.
    for name, value in runtime.items():
        if isinstance(value, Mapping) and isinstance(parameters.get(name), Mapping):
            unknown += _unknown_keys(value, parameters[name], f"{name}.")
    if unknown:
        lines = []
        for name, among in unknown:
            hint = _meant(name.rpartition(".")[2], among)
            if name == "streaming":
                hint = (
                    ": a setting of streaming.yml takes its own name, e.g. "
                    "`--params trigger=available_now`"
                )
            lines.append(f"'{name}'{hint}")
        raise StreamingConfigError(
            "--params names what nothing in this project reads (no parameter "
            "of conf/<env>/parameters*.yml, no setting of streaming.yml, no "
            "${runtime_params:...} in conf/), so the run would ignore it:\n  - "
            + "\n  - ".join(lines)
            + "\nFix the name, or declare it in parameters.yml."
        )


def _unknown_keys(
    given: Mapping, declared: Mapping, prefix: str
) -> list[tuple[str, list[str]]]:
    """The dotted names of ``given`` that ``declared`` (a parameter's
    mapping) does not have, each with the keys it has where it is missing."""
    unknown = []
    for key, value in given.items():
        if key not in declared:
            unknown.append((f"{prefix}{key}", sorted(map(str, declared))))
        elif isinstance(value, Mapping) and isinstance(declared[key], Mapping):
            unknown += _unknown_keys(value, declared[key], f"{prefix}{key}.")
    return unknown


def _meant(name: str, known: list[str] | tuple[str, ...]) -> str:
    fix = did_you_mean(name, known)
    return f": {fix}" if fix else ""


_RUN_THE_WRITER = "(`kedro run --pipelines <name>`)"


def _with_writers(name: str, problem: str) -> str:
    """``problem``, its "run the pipeline that writes it first" naming the
    project's pipelines that write ``name``, when some do."""
    if _RUN_THE_WRITER not in problem:
        return problem
    writers = sorted(
        key
        for key, each in all_pipelines().items()
        if key != "__default__" and name in each.all_outputs()
    )
    if not writers:
        return problem
    return problem.replace(
        _RUN_THE_WRITER,
        f"(the {' and '.join(writers)} pipeline writes it: `kedro run --pipelines "
        f"{writers[0]}`, with this run's --env)",
    )


def check_configuration(
    sinks: dict[str, SparkStreamingDataset],
    sources: dict[str, SparkStreamingDataset],
    readers: dict[str, list[str]] | None = None,
) -> None:
    """Fails, naming every problem and its fix, unless the datasets can work.

    ``readers`` maps each source to the sinks whose queries read it."""
    problems = [
        f"'{name}' {problem}"
        for name, dataset in sinks.items()
        for problem in dataset.sink_problems()
    ]
    problems += [
        f"'{name}' {_with_writers(name, problem)}"
        for name, dataset in sources.items()
        for problem in dataset.source_problems()
    ]
    run = RunEntries(sources, sinks, readers or {})
    problems += [p for connector in CONNECTORS for p in connector.problems(run)]
    where = {
        name: normal_path(d.checkpoint) for name, d in sinks.items() if d.checkpoint
    }
    shared = Counter(where.values())
    problems += [
        f"{', '.join(sorted(n for n, p in where.items() if p == path))} share the "
        f"checkpoint '{next(sinks[n].checkpoint for n in sorted(where) if where[n] == path)}'"
        ": give each sink its own"
        for path, count in shared.items()
        if count > 1
    ]
    if problems:
        raise StreamingConfigError(
            "Streaming configuration in conf/ cannot work:\n  - "
            + "\n  - ".join(problems)
        )


def _check_paths_resolve(run: RunSpec) -> None:
    paths = {name: [sink.checkpoint] for name, sink in run.sinks.items()}
    if run.state is not None:
        paths["state_dir (streaming.yml)"] = [str(run.state.path)]
    check_paths_resolve_in_the_project(paths, run.project_path)


def _check_connectors_before_spark(run: RunSpec) -> None:
    for connector in CONNECTORS:
        connector.check_before_spark(run)


def _check_not_running(run: RunSpec) -> None:
    running = run.state.running() if run.state is not None else {}
    running = {name: info for name, info in running.items() if name in run.sinks}
    if running:
        raise StreamingConfigError(
            "Already running in another process: "
            + ", ".join(
                f"'{name}' (pid {info['pid']} on {info['host']})"
                for name, info in running.items()
            )
            + ". Stop that run first (Ctrl-C or SIGTERM): two queries on one "
            "checkpoint corrupt it."
        )


def _check_metrics_port(run: RunSpec) -> None:
    address, port = metrics_endpoint(run.settings)
    if run.sinks and port:  # taken: say so before Spark starts, not after
        check_port_free(address, port)


def _check_real_time(run: RunSpec, spark: SparkSession) -> None:
    real_time = {name: d for name, d in run.sinks.items() if d.real_time}
    check_real_time(spark.version, real_time, run.sources_of, bounded=run.bounded)
    check_real_time_intervals(spark, real_time)


def _check_paths_reach_the_cluster(run: RunSpec, spark: SparkSession) -> None:
    location = spark_location(spark)
    if location:
        paths = dataset_paths(run.catalog, run.pipeline.datasets())
        check_paths_reach_the_cluster(paths, location, run.env)


def _check_connectors_with_spark(run: RunSpec, spark: SparkSession) -> None:
    for connector in CONNECTORS:
        connector.check_with_spark(spark, run)


def _check_task_slots(run: RunSpec, spark: SparkSession) -> None:
    real_time = {name: d for name, d in run.sinks.items() if d.real_time}
    check_real_time_task_slots(spark, real_time, run.sources_of)


# Every check of a run before any query starts, in order, for `kedro run`
# (the first failure fails the run) and `validate` (the first failure of
# each stage is said, and the next stage checked). A new check is a line.
BEFORE_SPARK: tuple[Callable[[RunSpec], None], ...] = (
    lambda run: check_runtime_params(run.config_loader),
    lambda run: run_trigger(run.settings),
    lambda run: check_settings(run.settings),
    lambda run: planner_warm_up(run.settings),
    lambda run: check_catalog_has(run.catalog, run.pipeline, run.other_envs),
    lambda run: check_entries_named_as_used(run.catalog, run.pipeline),
    _check_paths_resolve,
    lambda run: check_streams_have_sinks(
        run.catalog, run.pipeline, {**run.sources, **run.sinks}, run.other_envs
    ),
    lambda run: check_configuration(run.sinks, run.sources, run.readers),
    _check_connectors_before_spark,
)
# What only a run needs, about what runs now: `validate`, a dry run made
# while the stream it checks runs (before a deploy), says them as notes.
WHILE_RUNNING: tuple[Callable[[RunSpec], None], ...] = (
    _check_not_running,
    _check_metrics_port,
)
WITH_SPARK: tuple[Callable[[RunSpec, SparkSession], None], ...] = (
    lambda run, spark: check_options(spark, run.sinks, run.sources, run.settings),
    _check_real_time,
    _check_paths_reach_the_cluster,
    _check_connectors_with_spark,
    _check_task_slots,
)


def check_before_spark(run: RunSpec, *, dry_run: bool = False) -> list[str]:
    """The checks that need no Spark: made before the session starts. A dry
    run does not fail on what only a run needs (another process running the
    queries, the metrics port taken): what they say, for its notes."""
    for check in BEFORE_SPARK:
        check(run)
    notes = []
    for check in WHILE_RUNNING:
        try:
            check(run)
        except StreamingConfigError as error:
            if not dry_run:
                raise
            notes.append(str(error))
    return notes


def check_with_spark(run: RunSpec, spark: SparkSession) -> None:
    """The checks made with the run's Spark, after ``check_before_spark``
    and before the first query starts."""
    for check in WITH_SPARK:
        check(run, spark)


def check_options(
    spark: SparkSession,
    sinks: dict[str, SparkStreamingDataset],
    sources: dict[str, SparkStreamingDataset],
    settings: dict[str, Any],
) -> None:
    """Fails on a source or sink option the running Spark does not know, or
    a value it would refuse (or misread), naming the closest known name."""
    names = OptionNames(spark)
    problems = []
    for name, dataset in {**sources, **sinks}.items():
        source = name in sources
        direction, args_name, options = (
            ("source", "load_args", dataset.load_options)
            if source
            else ("sink", "save_args", dataset.writer_options)
        )
        connector = dataset.connector
        # Names only: the values are secrets.
        credentials = dict.fromkeys(connector.spark_options(dataset), "")
        # A misspelt key of the plugin's is named by check_configuration.
        misspelt = misspelt_args(dataset.load_options, dataset.writer_options)
        options = {
            k: v for k, v in options.items() if k not in {m[1] for m in misspelt}
        }
        for where, checked in ((args_name, options), ("credentials", credentials)):
            problems += [
                f"'{name}' {problem}"
                for problem in option_problems(
                    names,
                    connector,
                    direction,
                    checked,
                    args_name=where,
                    spark_version=spark.version,
                )
            ]
        kind, value = next(iter((dataset.trigger or {None: None}).items()))
        if not source and kind in INTERVAL_TRIGGERS:
            problem = interval_problem(spark, value)
            if problem:
                problems.append(f"'{name}' has trigger {kind}: {problem}")
    if settings.get("trigger", "processing_time") == "processing_time":
        interval = settings.get("trigger_interval", "10 seconds")
        problem = interval_problem(spark, interval)
        if problem:
            problems.append(f"trigger_interval (streaming.yml or --params): {problem}")
    if problems:
        raise StreamingConfigError(
            "Options in conf/ that Spark would ignore or refuse:\n  - "
            + "\n  - ".join(problems)
        )
