"""The life of a run's streaming queries: checked, sequenced, watched, stopped.

Nodes only transform DataFrames; saving a streaming DataFrame starts a query
and returns at once. These hooks check the run's streaming configuration
before any query starts, then hand the run's queries to a
:class:`~kedro_streaming._run.supervisor.QuerySupervisor`: it starts each
sink's query with the run's trigger and the sink's name, holds back a stream
that reads a sink written earlier in the same run until that sink has
history, keeps the process alive while queries run, stops them cleanly on
Ctrl-C or SIGTERM, and turns a failed query into a failed run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from kedro.framework.context import KedroContext
from kedro.framework.hooks import hook_impl
from kedro.io import DataCatalog
from kedro.pipeline import Pipeline

from kedro_streaming._checks.avro_replans import register_avro_values
from kedro_streaming._checks.catalog import fan_out
from kedro_streaming._checks.checks import check_before_spark, check_with_spark
from kedro_streaming._checks.constants import check_constants
from kedro_streaming._checks.planner_warmup import planner_warm_up
from kedro_streaming._checks.plans import Plans, check_plans
from kedro_streaming._checks.spec import RunSpec
from kedro_streaming._nodes.lookup import run_reads_each_table_once
from kedro_streaming._observe.endpoint import serve_metrics
from kedro_streaming._observe.state import streaming_settings
from kedro_streaming._run.console import run_console
from kedro_streaming._run.supervisor import QuerySupervisor
from kedro_streaming._session.session import spark_session

# Named as before 0.7.0: projects' logging.yml may set its level.
logger = logging.getLogger("kedro_streaming.queries")


class StreamingQueryHooks:
    """Checks, sequences, watches and stops the run's streaming queries.

    Example:
        ```python
        # src/<package>/settings.py
        from kedro_streaming import SparkHooks, StreamingQueryHooks

        HOOKS = (SparkHooks(), StreamingQueryHooks())
        ```
    """

    def __init__(self) -> None:
        self._config_loader: Any = None
        self._settings: dict[str, Any] = {}
        self._queries = QuerySupervisor()
        self._leave_run: Callable[[bool], None] = _as_it_was

    @hook_impl
    def after_context_created(self, context: KedroContext) -> None:
        self._settings = streaming_settings(context.config_loader)
        self._config_loader = context.config_loader
        # The progress lines are INFO: shown unless the project's logging
        # configuration sets this package's level (Kedro's default sets none).
        runtime_logger = logging.getLogger("kedro_streaming")
        if runtime_logger.level == logging.NOTSET:
            runtime_logger.setLevel(logging.INFO)

    @hook_impl
    def before_pipeline_run(
        self, run_params: dict[str, Any], pipeline: Pipeline, catalog: DataCatalog
    ) -> None:
        """Fails on a configuration that cannot work, before any query starts."""
        # A run that a second Ctrl-C ended in a node had no end hook.
        self._leave(failed=True)
        # First: the checks' lines and errors are the run's already.
        self._leave_run = _enter_run()
        self._queries = QuerySupervisor()
        try:
            self._queries = self._checked_run(run_params, pipeline, catalog)
        except BaseException:
            # Kedro calls no other hook of a run that fails here.
            self._leave(failed=True)
            raise

    @hook_impl
    def before_dataset_saved(self, dataset_name: str, data: Any, node: Any) -> None:
        """Starts a sink's query, named after the sink, with the run's trigger."""
        self._queries.start(dataset_name, data)

    @hook_impl
    def before_dataset_loaded(self, dataset_name: str, node: Any) -> None:
        """Holds back a stream over a sink this run writes until it has history."""
        self._queries.hold_back(dataset_name)

    @hook_impl
    def after_pipeline_run(self, run_params: dict[str, Any]) -> None:
        """Keeps the run alive while any query runs; fails if one fails."""
        try:
            self._queries.run_to_the_end()
        except BaseException:
            self._end_run(failed=True)
            raise
        self._end_run(failed=False)

    @hook_impl
    def on_pipeline_error(self, error: Exception, run_params: dict[str, Any]) -> None:
        self._queries.stop_all()
        self._end_run(failed=True)

    def _end_run(self, failed: bool) -> None:
        try:
            self._queries.end()
        except BaseException:
            failed = True  # its error is the run's now: printed at exit
            raise
        finally:
            self._leave(failed)

    def _leave(self, failed: bool) -> None:
        self._leave_run(failed)
        self._leave_run = _as_it_was

    def _checked_run(
        self, run_params: dict[str, Any], pipeline: Pipeline, catalog: DataCatalog
    ) -> QuerySupervisor:
        """The run's queries, ready to start once every check passed."""
        run = RunSpec.read(
            catalog,
            pipeline,
            self._settings,
            env=run_params.get("env"),
            project_path=run_params.get("project_path"),
            config_loader=self._config_loader,
        )
        plans = self._check(run)
        for line in fan_out(catalog, pipeline, list(run.sinks)):
            logger.warning("Fan-out: %s.", line)
        metrics, linger = serve_metrics(self._settings) if run.sinks else (None, 0.0)
        queries = QuerySupervisor(
            run,
            metrics=metrics,
            serve_after_failure=linger,
            planner_warm_up=planner_warm_up(self._settings),
            records={name: v.record for name, v in plans.verdicts.items()},
        )
        queries.watch_signals()
        # Last: the run starts what was checked; each node runs once.
        queries.put_back_nodes = plans.replay()
        return queries

    def _check(self, run: RunSpec) -> Plans:
        """Every check of the run, each query's plan built among them."""
        began = time.monotonic()
        check_before_spark(run)
        checking = time.monotonic() - began
        spark = spark_session()
        began = time.monotonic()
        check_with_spark(run, spark)
        # Every query built and checked before the first starts, as `validate`
        # does: a node's mistake fails the run before anything is written.
        planning = time.monotonic()
        plans = check_plans(spark, run)
        check_constants(spark, run.catalog, run.pipeline, plans)
        planning = time.monotonic() - planning
        register_avro_values(run.catalog, run.pipeline, run.sinks, plans)
        logger.info(
            "Checked the streaming configuration in %.2f s (the queries' plans "
            "%.2f s): %d sources, %d sinks.",
            checking + time.monotonic() - began,
            planning,
            len(run.sources),
            len(run.sinks),
        )
        return plans


def _enter_run() -> Callable[[bool], None]:
    """What a run changes while it runs: the console, and each table that a
    ``Lookup`` reads, read once. Returns what puts both back."""
    end_console = run_console()
    end_reads = run_reads_each_table_once()

    def leave(failed: bool) -> None:
        end_reads()
        end_console(failed)

    return leave


def _as_it_was(failed: bool) -> None:
    pass
