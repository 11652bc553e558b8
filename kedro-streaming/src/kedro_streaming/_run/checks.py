"""What is checked before any query of a run starts."""

from __future__ import annotations

import difflib
import logging
import re
from collections import Counter
from pathlib import Path
from typing import Any

from kedro.config import MissingConfigException
from kedro.io import DataCatalog
from kedro.pipeline import Pipeline
from pyspark.sql import SparkSession

from kedro_streaming._connectors.base import RunEntries
from kedro_streaming._connectors.dataset import (
    SparkStreamingDataset,
)
from kedro_streaming._connectors.files import (
    normal_path,
)
from kedro_streaming._connectors.registry import CONNECTORS
from kedro_streaming._run.catalog import (
    all_pipelines,
    check_catalog_has,
    check_entries_named_as_used,
    check_paths_reach_the_cluster,
    check_paths_resolve_in_the_project,
    check_streams_have_sinks,
    dataset_paths,
    loader_like,
    query_sources,
    streaming_datasets,
)
from kedro_streaming._run.options import (
    INTERVAL_TRIGGERS,
    OptionNames,
    interval_problem,
    option_problems,
)
from kedro_streaming._run.planner_warmup import planner_warm_up
from kedro_streaming._run.realtime import (
    check_real_time,
    check_real_time_intervals,
    check_real_time_task_slots,
)
from kedro_streaming._run.session import spark_location
from kedro_streaming._run.state import SETTING_NAMES, StreamState
from kedro_streaming.errors import StreamingConfigError

# Named as before 0.7.0: projects' logging.yml may set its level.
logger = logging.getLogger("kedro_streaming.checks")

TRIGGERS = ("processing_time", "available_now")


def run_trigger(settings: dict[str, Any]) -> dict[str, Any] | None:
    """The trigger that the run's ``trigger`` setting forces on every sink.

    Returns:
        ``{"availableNow": True}`` for ``available_now``; ``None`` for
        ``processing_time``, which leaves each sink its own trigger or the
        ``trigger_interval`` default.
    """
    trigger = settings.get("trigger", "processing_time")
    if trigger not in TRIGGERS:
        raise StreamingConfigError(
            f"Unknown trigger '{trigger}': run with `--params trigger=available_now` "
            "(process what is there, then stop) or `--params trigger=processing_time` "
            "(run until stopped)."
        )
    return {"availableNow": True} if trigger == "available_now" else None


def check_settings(settings: dict[str, Any]) -> None:
    """Fails on a ``streaming.yml`` setting the runtime does not read (a
    misspelt one would leave the default in force without a word)."""
    unknown = sorted(set(settings) - set(SETTING_NAMES))
    if unknown:
        lines = []
        for name in unknown:
            close = difflib.get_close_matches(name, SETTING_NAMES, n=1, cutoff=0.6)
            lines.append(
                f"'{name}'" + (f": did you mean '{close[0]}'?" if close else "")
            )
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
    unknown = [name for name in runtime if name not in known]
    if unknown:
        lines = []
        for name in unknown:
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
            hint = f": did you mean '{close[0]}'?" if close else ""
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


def run_readers(
    catalog: DataCatalog,
    pipeline: Pipeline,
    sources: dict[str, SparkStreamingDataset],
    sinks: dict[str, SparkStreamingDataset],
) -> dict[str, list[str]]:
    """Each source, and each sink read back as a stream, with the sinks whose
    queries read it."""
    readers: dict[str, list[str]] = {name: [] for name in sources}
    for sink in sinks:
        for name in query_sources(catalog, pipeline, sink):
            readers.setdefault(name, []).append(sink)
    return readers


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


def check_before_spark(
    catalog: DataCatalog,
    pipeline: Pipeline,
    settings: dict[str, Any],
    state: StreamState,
    *,
    other_envs=None,
    project_path: Path | None = None,
) -> None:
    """The checks that need no Spark: made before the session starts.

    Args:
        other_envs: Returns the names each other environment's catalog
            declares, to say which environment a missing dataset is in
            (read only when one is missing).
        project_path: The project's folder, where relative paths must resolve.
    """
    run_trigger(settings)
    check_settings(settings)
    planner_warm_up(settings)
    other_envs = other_envs or dict
    check_catalog_has(catalog, pipeline, other_envs)
    check_entries_named_as_used(catalog, pipeline)
    sinks = streaming_datasets(catalog, pipeline.all_outputs())
    check_paths_resolve_in_the_project(
        {
            **{name: [sink.checkpoint] for name, sink in sinks.items()},
            "state_dir (streaming.yml)": [str(state.path)],
        },
        project_path,
    )
    sources = streaming_datasets(catalog, pipeline.inputs())
    check_streams_have_sinks(catalog, pipeline, {**sources, **sinks}, other_envs)
    check_configuration(sinks, sources, run_readers(catalog, pipeline, sources, sinks))
    for connector in CONNECTORS:
        connector.check_before_spark(RunEntries(sources, sinks, settings=settings))
    running = {name: info for name, info in state.running().items() if name in sinks}
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


def check_run(
    spark: SparkSession,
    catalog: DataCatalog,
    pipeline: Pipeline,
    settings: dict[str, Any],
    *,
    env: str | None = None,
) -> None:
    """The checks made with the run's Spark, after ``check_before_spark``
    and before the first query starts; fails on the first kind of problem
    found, naming each problem of that kind and its fix."""
    sinks = streaming_datasets(catalog, pipeline.all_outputs())
    sources = streaming_datasets(catalog, pipeline.inputs())
    trigger = run_trigger(settings)
    check_options(spark, sinks, sources, settings)
    real_time_sinks = {name: d for name, d in sinks.items() if d.real_time}

    def sources_of(sink: str) -> dict[str, SparkStreamingDataset]:
        return query_sources(catalog, pipeline, sink)

    check_real_time(
        spark.version, real_time_sinks, sources_of, bounded=trigger is not None
    )
    check_real_time_intervals(spark, real_time_sinks)
    location = spark_location(spark)
    if location:
        check_paths_reach_the_cluster(
            dataset_paths(catalog, pipeline.datasets()), location, env
        )
    readers = run_readers(catalog, pipeline, sources, sinks)
    run = RunEntries(sources, sinks, readers, settings)
    for connector in CONNECTORS:
        connector.check_with_spark(spark, run)
    check_real_time_task_slots(spark, real_time_sinks, sources_of)


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
        credentials = {key: "" for key in dataset.credential_keys}  # names only
        # A misspelt key of the plugin's is named by check_configuration.
        options = {k: v for k, v in options.items() if k not in dataset.misspelt_keys}
        for where, checked in ((args_name, options), ("credentials", credentials)):
            problems += [
                f"'{name}' {problem}"
                for problem in option_problems(
                    names,
                    dataset.file_format,
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
