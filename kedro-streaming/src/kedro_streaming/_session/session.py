"""The SparkSession of a project, built from ``spark.yml`` when first needed:
commands that only read configuration (``kedro catalog``, ``kedro viz``)
never start a JVM; ``kedro run`` starts it while Kedro builds the run."""

from __future__ import annotations

import logging
import os
import sys
import threading
from pathlib import Path
from typing import Any

import click
import pyspark
from kedro.framework import project as kedro_project
from kedro.framework.context import KedroContext
from kedro.framework.hooks import hook_impl
from pyspark.sql import SparkSession
from pyspark.sql.utils import is_remote

from kedro_streaming._connectors.registry import CONNECTORS
from kedro_streaming._session.defects import work_around_defects
from kedro_streaming._session.jvm import (
    records_class_archive,
    start_jvm,
    with_project_files,
)
from kedro_streaming._session.packages import (
    local_scala_version,
    remember_resolution,
    send_package,
    without_resolution,
)
from kedro_streaming._spark import class_loads, gateway_started, jvm_of
from kedro_streaming.errors import StreamingConfigError
from kedro_streaming.problems import TYPO, did_you_mean

_settings: dict[str, str] = {}
# Where a local Spark's UI listens (SPARK_LOCAL_IP, which Spark's UI reads).
_ui_address: list[str] = []
# A spark.yml the running PySpark cannot use, said when a run starts Spark:
# `kedro catalog` and `kedro viz` start none, and a run says it in one line.
_refused: list[StreamingConfigError] = []
# Named as before 0.7.0: projects' logging.yml may set its level.
logger = logging.getLogger("kedro_streaming.session")
# The checks' logger, as named before 0.7.0.
_checks_logger = logging.getLogger("kedro_streaming.checks")
# The JVM of a `kedro run`, started while Kedro builds the run's catalog and
# pipelines (a second of Python, importing pandas among others): the thread
# that starts it, and what that returned or raised.
_ahead: list[tuple[threading.Thread, dict[str, Any]]] = []


def configure_spark(
    settings: dict[str, object],
    streaming: dict[str, object] | None = None,
    project: Path | None = None,
) -> None:
    """Sets what the session is built from (``spark.yml``; ``streaming``'s
    ``spark_ui_*``), without starting it; a package that does not fit the
    installed PySpark fails here, before Spark downloads it. Relative paths
    in the JVM's options are in ``project`` (default: the working directory).
    """
    conf = {key: str(value) for key, value in settings.items() if value is not None}
    conf = with_project_files(conf, project or Path.cwd())
    streaming = streaming or {}
    if streaming.get("spark_ui_port") not in (None, ""):
        conf["spark.ui.port"] = str(streaming["spark_ui_port"])
    # Spark's own default lets anyone who reaches the UI kill its jobs.
    kill = streaming.get("spark_ui_kill_enabled")
    conf.setdefault(
        "spark.ui.killEnabled", "false" if kill in (None, "") else str(kill).lower()
    )
    _ui_address[:] = [str(streaming.get("spark_ui_address", "127.0.0.1") or "")]
    if not conf.get("spark.remote"):  # a Connect server brings its own packages
        packages, scala = conf.get("spark.jars.packages", ""), local_scala_version()
        for connector in CONNECTORS:
            connector.check_package(packages, pyspark.__version__, scala, None)
    _settings.clear()
    _settings.update(conf)


def spark_session() -> SparkSession:
    """The project's SparkSession; the first call builds it from ``spark.yml``.

    ``spark.master`` says where Spark runs (``local[2]``, ``spark://``, ``yarn``,
    ``k8s://``); ``spark.remote`` (``sc://host:15002``) uses a Spark Connect
    server instead, and then ``spark.master`` is the server's to choose.

    Example:
        ```python
        # In `kedro ipython` (or a notebook of the project): no pipeline runs.
        from kedro_streaming import spark_session

        spark = spark_session()  # from conf/<env>/spark.yml, at the first call
        spark.read.parquet("data/02_intermediate/bronze_trips").count()
        ```
    """
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    if _refused:
        raise _refused[0]
    conf = dict(_settings)
    remote = conf.pop("spark.remote", None)
    spark = _start(conf, remote)
    logger.info(
        "Spark %s on %s.",
        spark.version,
        f"the Spark Connect server {remote}" if remote else spark.sparkContext.master,
    )
    if remote:
        _log_settings_the_server_keeps(spark, conf, remote)
    else:
        _quiet_local_logs(spark)
    work_around_defects(spark, chosen=_settings)
    # The packages the running Spark loaded: a Connect server's or a cluster's
    # Spark may differ from the local PySpark.
    for connector in CONNECTORS:
        connector.check_package(
            spark.conf.get("spark.jars.packages", None) or "",
            spark.version,
            None,
            f"restart the Spark Connect server at {remote} with --packages"
            if remote
            else None,
        )
    if spark_location(spark):
        _send_project_code(spark)
    if not remote:
        check_spark_settings(spark, conf)
        check_setting_classes(spark, conf)
    return spark


def _start(conf: dict[str, str], remote: str | None) -> SparkSession:
    """Starts Spark with ``conf``: a JVM of this process (its packages
    resolved once), or a session of the Spark Connect server ``remote``."""
    resolved_here = False  # spark-submit resolved spark.jars.packages just now
    if remote:
        conf.pop("spark.master", None)
        # PySpark's own switch to Spark Connect: every getOrCreate() in this
        # process (kedro-datasets' included) then returns this session.
        os.environ["SPARK_REMOTE"] = remote
    elif _ahead:
        thread, outcome = _ahead.pop()
        thread.join()
        if "error" in outcome:
            raise outcome["error"]
        resolved_here = outcome["resolved_here"]
    elif not gateway_started():
        resolved_here = _launch_jvm(conf)
    try:
        spark = SparkSession.builder.config(map=conf).getOrCreate()
    except Exception as error:  # Py4J's error: Spark refused a setting
        if remote:
            raise
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        cause = next((line for line in lines if "Exception:" in line), lines[0])
        raise StreamingConfigError(
            f"Spark did not start with the settings of spark.yml: {cause} Fix "
            "conf/<env>/spark.yml (or the --params that set it)."
        ) from None
    if resolved_here:
        remember_resolution(conf, spark.sparkContext.getConf().get("spark.jars", ""))
    return spark


def _launch_jvm(conf: dict[str, str]) -> bool:
    """Starts a local session's JVM; whether spark-submit resolved
    ``spark.jars.packages`` (rather than taking the jars of an earlier start)."""
    _set_ui_address(conf)
    _python_workers_like_this_one(conf)
    launch = without_resolution(conf)
    start_jvm(launch)
    return launch is conf


def start_jvm_ahead() -> None:
    """Starts a local session's JVM in the background while Kedro builds the
    run; not when this run records the archive of Spark's classes (a run that
    fails its checks would wait for it), nor for Spark Connect."""
    conf = dict(_settings)
    if _refused or _ahead or gateway_started() or conf.get("spark.remote"):
        return
    if records_class_archive(conf):
        return
    outcome: dict[str, Any] = {}

    def launch() -> None:
        try:
            outcome["resolved_here"] = _launch_jvm(conf)
        except BaseException as error:  # raised where the session is built
            outcome["error"] = error

    thread = threading.Thread(target=launch, name="spark-jvm-start", daemon=True)
    thread.start()
    _ahead.append((thread, outcome))


def _running_a_pipeline() -> bool:
    """Whether this process is a ``kedro run`` (a command named ``run``)."""
    command = click.get_current_context(silent=True)
    return command is not None and command.info_name == "run"


def _quiet_local_logs(spark: SparkSession) -> None:
    spark.sparkContext.setLogLevel("WARN")
    if spark.sparkContext.uiWebUrl:
        logger.info(
            "Spark UI: %s (Structured Streaming tab: each query's batches).",
            spark.sparkContext.uiWebUrl,
        )
        moved = ui_port_moved(
            _settings.get("spark.ui.port", ""), spark.sparkContext.uiWebUrl
        )
        if moved:
            logger.warning(moved)
    # Delta's MERGE keeps its source in a local checkpoint, and Spark warns
    # that such an RDD cannot be recomputed, at every MERGE: not a problem.
    log4j = jvm_of(spark).org.apache.logging.log4j
    log4j.core.config.Configurator.setLevel(
        "org.apache.spark.rdd.MapPartitionsRDD", log4j.Level.ERROR
    )


def ui_port_moved(asked: str, url: str) -> str | None:
    """What to say when Spark's UI is not on the port asked for (``asked``:
    spark.ui.port, empty for 4040), Spark having taken the next free one."""
    wanted = int(asked) if str(asked).strip().isdigit() else 4040
    got = url.rstrip("/").rpartition(":")[2]
    if wanted == 0 or not got.isdigit() or int(got) == wanted:
        return None
    return (
        f"Spark UI: port {wanted} is taken (another run's Spark UI, or another "
        f"program), so Spark took {got}, the next free one: the UI is at {url}. "
        "To choose its port, set spark_ui_port in streaming.yml (or `--params "
        "spark_ui_port=<port>`)."
    )


def _python_workers_like_this_one(conf: dict[str, str]) -> None:
    """Has a local Spark's Python workers run this process's Python, not
    ``python3`` from PATH (not the virtualenv when ``kedro`` runs by its
    path, unactivated)."""
    local = conf.get("spark.master", "local").startswith("local")
    chosen = "spark.pyspark.python" in conf or os.environ.get("PYSPARK_PYTHON")
    if local and not chosen:
        os.environ["PYSPARK_PYTHON"] = sys.executable


def _set_ui_address(conf: dict[str, str]) -> None:
    """Has a local Spark's UI listen on ``spark_ui_address`` (Spark binds it
    to SPARK_LOCAL_IP, which a cluster's executors need to reach)."""
    address = _ui_address[0] if _ui_address else ""
    if address and conf.get("spark.master", "local").startswith("local"):
        os.environ["SPARK_LOCAL_IP"] = address


def spark_location(spark: SparkSession) -> str | None:
    """Where Spark runs, or ``None`` when it runs in this process (``local``)."""
    if is_remote():
        return f"the Spark Connect server {os.environ.get('SPARK_REMOTE', '')}"
    master = spark.sparkContext.master
    return None if master.startswith("local") else f"the cluster {master}"


def _log_settings_the_server_keeps(
    spark: SparkSession, conf: dict[str, str], remote: str
) -> None:
    """Says which ``spark.yml`` settings a Spark Connect server did not take
    (a client sets only its session's SQL settings)."""
    kept = sorted(
        key for key, value in conf.items() if spark.conf.get(key, None) != value
    )
    if kept:
        logger.info(
            "Spark Connect server %s (Spark %s) keeps its own %s: set them where "
            "the server starts.",
            remote,
            spark.version,
            ", ".join(kept),
        )


def _send_project_code(spark: SparkSession) -> None:
    """Sends the project's package, and this runtime, to the executors, which
    have neither this process's source folder nor its site-packages."""
    if not kedro_project.PACKAGE_NAME:  # not in a Kedro project, e.g. a notebook
        return
    runtime = __package__.partition(".")[0]  # kedro_streaming, not this room
    for name in (kedro_project.PACKAGE_NAME, runtime):
        send_package(spark, name)


def check_spark_settings(spark: SparkSession, conf: dict[str, str]) -> None:
    """Warns about a ``spark.yml`` key that Spark does not read but is close to
    one it does: Spark keeps any key, and plugins (Delta) read keys of their own."""
    jvm = jvm_of(spark)
    if jvm is None:
        return
    try:
        entries = jvm.java.lang.Class.forName(
            "org.apache.spark.internal.config.ConfigEntry$"
        )
        field = entries.getDeclaredField("knownConfigs")
        field.setAccessible(True)
        known = set(field.get(entries.getField("MODULE$").get(None)).keySet())
    except Exception as error:  # noqa: BLE001 (another Spark's internals)
        _checks_logger.debug("spark.yml's keys not checked: %s", error)
        return
    for key in sorted(conf):
        if key in known or not key.startswith("spark."):
            continue
        fix = did_you_mean(key, known, cutoff=TYPO)
        if fix:
            _checks_logger.warning(
                "spark.yml sets `%s`, which Spark does not read: %s", key, fix
            )


# spark.yml settings that name a JVM class: Spark loads it only when a query
# starts, and a name this Spark lacks fails there, as a stack trace.
CLASS_SETTINGS = (
    "spark.sql.streaming.checkpointFileManagerClass",
    "spark.sql.streaming.stateStore.providerClass",
)


def check_setting_classes(spark: SparkSession, conf: dict[str, str]) -> None:
    """Fails unless each class ``spark.yml`` names (``CLASS_SETTINGS``)
    loads in this Spark."""
    jvm = jvm_of(spark)
    missing = [
        f"  - {key}: {conf[key]}"
        for key in CLASS_SETTINGS
        if key in conf and jvm is not None and not class_loads(spark, conf[key])
    ]
    if missing:
        raise StreamingConfigError(
            f"spark.yml names classes that Spark {spark.version} does not have:\n"
            + "\n".join(missing)
            + "\nFix: name the class as this Spark line has it (its checkpoint file "
            "managers are in org.apache.spark.sql.execution.streaming up to 4.0, "
            "in its checkpointing package from 4.1), or drop the line for "
            "Spark's default."
        )


class SparkHooks:
    """Reads ``spark.yml``; the session itself starts with the first pipeline run
    (``kedro run`` starts its JVM at once, the session on it when the run begins).

    Example:
        ```python
        # src/<package>/settings.py
        from kedro_streaming import SparkHooks, StreamingQueryHooks

        HOOKS = (SparkHooks(), StreamingQueryHooks())
        CONFIG_LOADER_ARGS = {
            "config_patterns": {
                "spark": ["spark*", "spark*/**"],
                "streaming": ["streaming*", "streaming*/**"],
            },
        }
        ```
    """

    @hook_impl
    def after_context_created(self, context: KedroContext) -> None:
        from kedro_streaming._observe.state import streaming_settings  # noqa: PLC0415

        _refused.clear()
        try:
            configure_spark(
                context.config_loader["spark"],
                streaming_settings(context.config_loader),
                Path(context.project_path),
            )
        except StreamingConfigError as error:
            _refused.append(error)
        if _running_a_pipeline():
            start_jvm_ahead()

    @hook_impl
    def before_pipeline_run(self) -> None:
        spark_session()
