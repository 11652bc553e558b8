"""What is checked before any query of a run starts."""

from __future__ import annotations

import contextlib
import difflib
import json
import logging
import os
import re
from collections import Counter
from pathlib import Path
from typing import Any

import fsspec
from kedro.config import MissingConfigException
from kedro.io import DataCatalog, MemoryDataset
from kedro.pipeline import Pipeline
from pyspark.sql import SparkSession
from pyspark.sql.utils import is_remote

from .dataset import APPEND_ONLY_FORMATS, SparkDataset, SparkStreamingDataset
from .errors import StreamingConfigError
from .options import INTERVAL_TRIGGERS, OptionNames, interval_problem, option_problems
from .security import (
    connection_problem,
    forbidden_topics,
    kafka_python_logs,
    login_problem,
)
from .session import spark_location
from .state import SETTING_NAMES, StreamState

logger = logging.getLogger(__name__)

TRIGGERS = ("processing_time", "available_now")
# The first Spark with Real-Time Mode, and the first whose Real-Time Mode runs
# stateful operators (streaming aggregations, dropDuplicates).
REAL_TIME_SPARK = (4, 1)
STATEFUL_REAL_TIME_SPARK = (4, 3)
# The root cause in a Kafka client's error, e.g. "...errors.TimeoutException: ..."
_KAFKA_ERROR = re.compile(r"org\.apache\.kafka\.common\.errors\.(\w+: [^\n]*)")


# Kafka source options that size micro-batches, which Spark refuses in
# Real-Time Mode.
BATCH_SIZE_OPTIONS = ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay")


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
        parameters = _loader_like(config_loader, runtime_params={})["parameters"]
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


def check_spark_settings(spark: SparkSession, conf: dict[str, str]) -> None:
    """Warns about a ``spark.yml`` key that Spark does not know but is close
    to one it does (``spark.sql.shufle.partitions``): Spark keeps any key,
    and ignores what it does not read. Only a warning, since plugins (Delta,
    catalogs) read keys of their own."""
    jvm = getattr(spark, "_jvm", None)
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
        logger.debug("spark.yml's keys not checked: %s", error)
        return
    for key in sorted(conf):
        if key in known or not key.startswith("spark."):
            continue
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.9)
        if close:
            logger.warning(
                "spark.yml sets '%s', which Spark does not read: did you mean '%s'?",
                key,
                close[0],
            )


def check_configuration(
    sinks: dict[str, SparkStreamingDataset], sources: dict[str, SparkStreamingDataset]
) -> None:
    """Fails, naming every problem and its fix, unless the datasets can work."""
    problems = [
        f"'{name}' {problem}"
        for name, dataset in sinks.items()
        for problem in dataset.sink_problems()
    ]
    problems += [
        f"'{name}' {problem}"
        for name, dataset in sources.items()
        for problem in dataset.source_problems()
    ]
    problems += _sinks_inside_sources(sinks, sources)
    problems += _file_sinks_ahead_of_their_checkpoint(sinks)
    where = {name: _normal(d.checkpoint) for name, d in sinks.items() if d.checkpoint}
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


def _sinks_inside_sources(
    sinks: dict[str, SparkStreamingDataset], sources: dict[str, SparkStreamingDataset]
) -> list[str]:
    """A sink that writes inside the folder a source of the run reads (or
    around it) would feed its own output back in."""
    problems = []
    for sink, sink_dataset in sinks.items():
        for source, source_dataset in sources.items():
            if not (sink_dataset.path and source_dataset.path):
                continue
            inner, outer = (
                _folder(sink_dataset.path),
                _folder(source_dataset.path),
            )
            if inner == outer or outer in inner.parents or inner in outer.parents:
                problems.append(
                    f"'{sink}' writes to '{sink_dataset.path}', inside or around "
                    f"the folder '{source_dataset.path}' that '{source}' reads: the "
                    "stream would read its own output. Give the sink a folder of "
                    "its own, outside the source's"
                )
    return problems


def _normal(path: str) -> str:
    """One spelling per place: ``data/x/``, ``./data/x`` and the absolute
    path of a local folder are the same checkpoint."""
    if "://" in path and not path.startswith("file://"):
        return path.rstrip("/")
    return str(_folder(path))


def _file_sinks_ahead_of_their_checkpoint(
    sinks: dict[str, SparkStreamingDataset],
) -> list[str]:
    """A file sink whose folder holds batches committed under an earlier
    checkpoint, with a new checkpoint: Spark's file sink skips each batch
    whose id its ``_spark_metadata`` log already has, so the new query's
    first batches would be read, recorded as done, and never written."""
    problems = []
    for name, dataset in sinks.items():
        if dataset.file_format not in APPEND_ONLY_FORMATS or not dataset.path:
            continue
        if dataset.foreach_batch or has_progress(dataset.checkpoint):
            continue
        fs, root = fsspec.core.url_to_fs(dataset.path)
        log = f"{root}/_spark_metadata"
        batches = (
            [
                entry
                for entry in fs.ls(log, detail=False)
                if entry.rstrip("/").rsplit("/", 1)[-1].split(".")[0].isdigit()
            ]
            if fs.exists(log)
            else []
        )
        if batches:
            problems.append(
                f"'{name}' has a new checkpoint, but its folder '{dataset.path}' already "
                f"holds {len(batches)} batches written under an earlier one: "
                "Spark's file sink would skip as many batches of the new query "
                f"without writing them. Start both afresh with `kedro streams "
                f"reset {name}`, or give the sink a new folder"
            )
    return problems


def _folder(path: str) -> Path:
    return Path(os.path.abspath(path.removeprefix("file://")))


def check_real_time(
    spark_version: str,
    sinks: dict[str, SparkStreamingDataset],
    sources_of,
    *,
    bounded: bool,
) -> None:
    """Fails unless the run's Real-Time Mode queries can run on this Spark.

    Args:
        spark_version: The version of the Spark that runs.
        sinks: The sinks whose queries run in Real-Time Mode.
        sources_of: A sink's name -> the streaming datasets its query reads.
        bounded: Whether the run forces a bounded trigger (available_now).
    """
    problems = []
    for name, dataset in sinks.items():
        if spark_tuple(spark_version) < REAL_TIME_SPARK:
            problems.append(
                f"'{name}' runs in Real-Time Mode, which Spark {spark_version} does "
                "not have: it came with Spark 4.1. Make the project for Spark 4.1 "
                "or later (spark_version in `kedro new --config`, or pyspark and "
                "the packages of spark.yml by hand), or give it a processingTime "
                "trigger in the catalog"
            )
        if bounded:
            problems.append(
                f"'{name}' runs in Real-Time Mode, whose queries run until stopped: "
                "run it without `--params trigger=available_now` (Ctrl-C or SIGTERM "
                "stops it cleanly)"
            )
        for source, source_dataset in sources_of(name).items():
            if source_dataset.file_format != "kafka":
                problems.append(
                    f"'{name}' runs in Real-Time Mode, which reads Kafka only, but "
                    f"its query reads '{source}' ({source_dataset.file_format}): run "
                    "it on a Kafka source, or give it a processingTime trigger"
                )
            elif limits := [
                option
                for option in BATCH_SIZE_OPTIONS
                if option in source_dataset.load_options
            ]:
                problems.append(
                    f"'{name}' runs in Real-Time Mode, which reads each record as it "
                    f"comes: its source '{source}' sets {' and '.join(limits)}, "
                    "which Spark refuses then; read the topic through a catalog "
                    "entry of its own without " + ("them" if len(limits) > 1 else "it")
                )
    _refuse_real_time(problems)


def check_real_time_intervals(
    spark: SparkSession, sinks: dict[str, SparkStreamingDataset]
) -> None:
    """Fails when a Real-Time Mode sink checkpoints more often than Spark
    allows (``spark.sql.streaming.realTimeMode.minBatchDuration``): Spark
    would fail the query once started, naming that setting only."""
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:  # Spark Connect: the server checks
        return
    setting = "spark.sql.streaming.realTimeMode.minBatchDuration"
    problems = []
    for name, dataset in sinks.items():
        interval = (dataset.trigger or {}).get("realTime")
        if not isinstance(interval, str):
            continue
        try:
            every = jvm.org.apache.spark.sql.streaming.Trigger.ProcessingTime(
                interval
            ).intervalMs()
            least = jvm.org.apache.spark.network.util.JavaUtils.timeStringAsMs(
                spark.conf.get(setting, "5s")
            )
        except Exception:  # noqa: BLE001 (check_options names an unreadable one)
            continue
        if every < least:
            problems.append(
                f"'{name}' would checkpoint every {interval}, more often than Spark "
                f"allows in Real-Time Mode ({setting}: {least / 1000:g} s): give "
                f"its realTime trigger in the catalog {least / 1000:g} seconds or "
                "more"
            )
    _refuse_real_time(problems)


def _refuse_real_time(problems: list[str]) -> None:
    if problems:
        raise StreamingConfigError(
            "Real-Time Mode cannot run here:\n  - " + "\n  - ".join(problems)
        )


def check_real_time_task_slots(
    spark: SparkSession, sinks: dict[str, SparkStreamingDataset], sources_of
) -> None:
    """Fails when a Real-Time Mode query would hold more tasks than a local
    Spark has cores.

    Such a query holds one task per partition of its Kafka topics (or
    ``minPartitions``) for as long as it runs; a task that finds no free
    core waits for the end of the batch, and its partition is never read,
    without an error. Checked on a local master only, whose cores are known
    before the query starts; a cluster's executors may still be joining.
    """
    slots = _local_cores(spark.conf.get("spark.master", ""))
    if slots is None:
        return
    problems = []
    for name in sinks:
        for source, dataset in sources_of(name).items():
            tasks = _kafka_source_tasks(dataset)
            if tasks is not None and tasks > slots:
                problems.append(
                    f"'{name}' runs in Real-Time Mode, which holds a task per "
                    f"partition of its Kafka source '{source}' ({tasks}) for as long "
                    f"as it runs, but Spark has {slots} cores: {tasks - slots} "
                    f"partition(s) would never be read. Give Spark at least {tasks} "
                    "cores (spark.master in spark.yml), or read a topic with at "
                    f"most {slots} partitions"
                )
    _refuse_real_time(problems)


def _local_cores(master: str) -> int | None:
    """The cores of a local master (``local``, ``local[4]``, ``local[*]``)."""
    if master == "local":
        return 1
    found = re.fullmatch(r"local\[(\d+|\*)(?:,\s*\d+)?\]", master)
    if not found:
        return None
    return (os.cpu_count() or 1) if found[1] == "*" else int(found[1])


def _kafka_source_tasks(dataset: SparkStreamingDataset) -> int | None:
    """The tasks Spark's Kafka source makes for ``dataset``: one per partition
    of its topics, ``minPartitions`` at least. None when that is not known
    before start (a pattern subscription, a broker that does not answer)."""
    options = dataset.load_options
    if "assign" in options:
        partitions = sum(len(p) for p in json.loads(options["assign"]).values())
    elif "subscribe" in options:
        from kafka.errors import KafkaError  # noqa: PLC0415

        topics = [t.strip() for t in str(options["subscribe"]).split(",")]
        try:
            with contextlib.closing(offsets_reader(dataset)) as consumer:
                counts = [consumer.partitions_for_topic(t) for t in topics]
        except KafkaError:
            return None
        if any(count is None for count in counts):
            return None  # a topic not created yet
        partitions = sum(len(count) for count in counts)
    else:
        return None
    return max(partitions, int(options.get("minPartitions", 0)))


# Logical plan nodes that keep state across micro-batches, and the first
# Spark whose Real-Time Mode runs them (None: none yet).
_STATEFUL_NODES = {
    "Aggregate": STATEFUL_REAL_TIME_SPARK,
    "Deduplicate": STATEFUL_REAL_TIME_SPARK,
    "DeduplicateWithinWatermark": None,
    "FlatMapGroupsWithState": None,
    "FlatMapGroupsInPandasWithState": None,
    "TransformWithState": None,
    "TransformWithStateInPySpark": None,
    "TransformWithStateInPandas": None,
    "Join": None,  # between two streams; with a static table it keeps no state
}


def real_time_plan_problem(frame: Any, spark_version: str) -> str | None:
    """What Real-Time Mode in this Spark cannot run in ``frame``'s plan: its
    stateful operators. Spark itself refuses them only once the query runs.

    Over Spark Connect the plan is the server's: Spark checks it at the start.
    """
    jdf = getattr(frame, "_jdf", None)
    if jdf is None:
        return None
    refused, stack = set(), [jdf.queryExecution().analyzed()]
    while stack:
        node = stack.pop()
        children = node.children()
        kids = [children.apply(i) for i in range(children.size())]
        stack.extend(kids)
        name = node.nodeName()
        if name not in _STATEFUL_NODES or not node.isStreaming():
            continue
        if name == "Join" and not all(kid.isStreaming() for kid in kids):
            continue
        since = _STATEFUL_NODES[name]
        if since is None or spark_tuple(spark_version) < since:
            refused.add(name)
    if not refused:
        return None
    return (
        f"Real-Time Mode in Spark {spark_version} does not run the stateful "
        f"operation(s) {', '.join(sorted(refused))} (streaming aggregations and "
        "dropDuplicates come with Spark 4.3): give the sink a processingTime "
        "trigger, or keep the query stateless"
    )


def spark_tuple(version: str) -> tuple[int, int]:
    """A Spark version's line as numbers: ``4.1.1`` -> ``(4, 1)``."""
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def check_streams_have_sinks(
    catalog: DataCatalog,
    pipeline: Pipeline,
    streaming: dict[str, SparkStreamingDataset],
    other_envs=dict,
) -> None:
    """Fails when a stream would end in no sink.

    A pipeline output downstream of a stream, without a catalog entry, would
    be kept in memory by Kedro: its query would never start.
    """
    if not streaming:
        return
    downstream = pipeline.from_inputs(*streaming).all_outputs()
    lost = sorted(
        name for name in pipeline.outputs() & downstream if not _declared(catalog, name)
    )
    if lost:
        envs = sorted(
            env
            for env, names in other_envs().items()
            if all(name in names for name in lost)
        )
        where = (
            " or ".join(f"`kedro run --env {env}`" for env in envs)
            if envs
            else "`kedro run --env <env>`"
        )
        raise StreamingConfigError(
            "No sink for "
            + ", ".join(f"'{name}'" for name in lost)
            + ": this environment's catalog does not declare "
            + ("them" if len(lost) > 1 else "it")
            + ", so the stream would stay in memory and never run. Declare a "
            "streaming sink in conf/<env>/catalog.yml, or run with the environment "
            f"that declares one ({where})."
        )


def _declared(catalog: DataCatalog, name: str) -> bool:
    return name in catalog and not isinstance(catalog[name], MemoryDataset)


def check_paths_reach_the_cluster(
    paths: dict[str, list[str]], where: str, env: str | None = None
) -> None:
    """Fails on relative paths when Spark does not run in this process.

    Executors on a cluster, or a Spark Connect server, resolve a relative path
    against their own working directory (or the cluster's default file
    system), so a run would write where this process cannot see, or read
    nothing.

    Args:
        paths: Each dataset's folders and checkpoints.
        where: Where Spark runs, for the message.
        env: The run's environment, for the message.
    """
    relative = [
        f"'{name}': '{path}'"
        for name, dataset_paths in sorted(paths.items())
        for path in dataset_paths
        if path and "://" not in path and not path.startswith(("/", "file:"))
    ]
    if relative:
        raise StreamingConfigError(
            f"Spark runs on {where}, which does not see this process's relative "
            "paths:\n  - " + "\n  - ".join(relative) + "\nSet input_root and "
            f"output_root in conf/{env or '<env>'}/globals.yml to storage that the "
            "driver and every executor see: hdfs://, s3a://, abfss://, gs://, or "
            "an absolute path on a shared mount."
        )


def check_avro_registries(
    sources: dict[str, SparkStreamingDataset],
    sinks: dict[str, SparkStreamingDataset],
) -> None:
    """Fails unless the registry of each Avro source and sink answers (its
    address and credentials right; a source's subject there). Needs no
    Spark."""
    problems = []
    for name, dataset in {**sources, **sinks}.items():
        try:
            if name in sources and dataset.reads_avro:
                dataset.avro_schemas  # noqa: B018 (asks the registry)
                dataset.avro_key_schemas  # noqa: B018
            elif name in sinks and dataset.writes_avro:
                dataset.check_registry()
        except StreamingConfigError as error:
            problems.append(f"'{name}': {error}")
    _refuse_avro(problems)


# spark.yml settings that name a JVM class: Spark loads it only when a query
# starts, and a name this Spark lacks fails there, as a stack trace.
CLASS_SETTINGS = (
    "spark.sql.streaming.checkpointFileManagerClass",
    "spark.sql.streaming.stateStore.providerClass",
)


def check_setting_classes(spark: SparkSession, conf: dict[str, str]) -> None:
    """Fails unless each class ``spark.yml`` names (``CLASS_SETTINGS``)
    loads in this Spark."""
    jvm = getattr(spark, "_jvm", None)
    missing = [
        f"  - {key}: {conf[key]}"
        for key in CLASS_SETTINGS
        if key in conf and jvm is not None and not _class_loads(jvm, conf[key])
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


def check_avro_package(
    spark: SparkSession,
    sources: dict[str, SparkStreamingDataset],
    sinks: dict[str, SparkStreamingDataset],
) -> None:
    """Fails unless Spark has its Avro package, when a dataset uses Avro."""
    names = [n for n, d in sources.items() if d.reads_avro] + [
        n for n, d in sinks.items() if d.writes_avro
    ]
    jvm = getattr(spark, "_jvm", None)  # none over Spark Connect: the server's
    if names and jvm is not None:
        if not _class_loads(jvm, "org.apache.spark.sql.avro.functions"):
            _refuse_avro(
                [
                    f"{', '.join(repr(n) for n in dict.fromkeys(names))} use Avro, "
                    "which this Spark cannot: add org.apache.spark:spark-avro_2.13:"
                    f"{spark.version} to spark.jars.packages in conf/base/spark.yml"
                ]
            )


def _refuse_avro(problems: list[str]) -> None:
    if problems:
        raise StreamingConfigError(
            "Avro datasets cannot start:\n"
            + "\n".join(f"  - {problem}" for problem in problems)
        )


def _class_loads(jvm, name: str) -> bool:
    try:
        jvm.java.lang.Class.forName(
            name, False, jvm.java.lang.Thread.currentThread().getContextClassLoader()
        )
    except Exception:  # noqa: BLE001 (Py4J wraps ClassNotFoundException)
        return False
    return True


def check_kafka_reachable(
    spark: SparkSession, name: str, dataset: SparkStreamingDataset, timeout: float
) -> None:
    """Fails within about ``timeout`` seconds unless the dataset's brokers accept it.

    First, as a client of this machine: the trust and key stores load, the
    brokers' certificates verify and the port speaks the protocol the
    credentials say (:func:`connection_problem`). Then where the queries will
    run: a batch read through Spark's Kafka source, with the dataset's
    ``kafka.*`` options (credentials included), that asks the brokers for
    metadata and reads no topic (a local master, a cluster and Spark Connect
    alike). Without it, Spark retries an unreachable broker or a wrong
    password inside a running query for a long time.
    """
    milliseconds = str(int(timeout * 1000))
    options = {
        f"kafka.{key}": value for key, value in dataset.kafka_client_config.items()
    }
    servers = options.get("kafka.bootstrap.servers", "")
    security = dataset.kafka_security
    try:
        problem = connection_problem(servers, security, timeout=min(timeout, 10))
    except StreamingConfigError as error:  # a store that does not load
        raise StreamingConfigError(f"'{name}': {error}") from None
    if problem:
        raise StreamingConfigError(
            f"'{name}': the Kafka broker at {servers} {problem}."
        )
    try:
        with _kafka_client_logs_off(spark):
            (
                spark.read.format("kafka")
                .options(**options)
                .option("subscribePattern", "(?!)")  # a pattern no topic matches
                .option("kafka.request.timeout.ms", milliseconds)
                .option("kafka.default.api.timeout.ms", milliseconds)
                .option("fetchOffset.numRetries", "1")
                .load()
                .count()
            )
    except Exception as error:  # py4j, PySpark and Spark Connect errors alike
        text = str(error)
        # The whole Java error, for the log file: the console gets its cause.
        logger.debug("'%s': Spark's Kafka client failed: %s", name, text)
        if "DATA_SOURCE_NOT_FOUND" in text or "find data source: kafka" in text:
            raise StreamingConfigError(
                f"'{name}': the Spark that runs (Spark {spark.version}) has no Kafka "
                "connector. Add org.apache.spark:spark-sql-kafka-0-10_2.13:"
                f"{spark.version} to spark.jars.packages in spark.yml, to "
                "spark-submit's --packages, or to the Spark Connect server's "
                "--packages, whichever starts Spark."
            ) from None
        raise StreamingConfigError(
            f"'{name}': the Kafka broker at {servers} "
            f"{_kafka_failure(text, security, timeout)}"
        ) from None


def _kafka_failure(text: str, security, timeout: float) -> str:
    """What Spark's Kafka client failed on, from its error's text."""
    cause = _KAFKA_ERROR.findall(text)
    detail = cause[-1] if cause else headline(RuntimeError(text))
    if "SaslAuthenticationException" in detail or "Authentication" in detail:
        return (
            f"refused the {security.mechanism} login of user "
            f"'{security.username or '?'}': check the password (and the user) in "
            "the entry the dataset names with `credentials:` in "
            "conf/<env>/credentials.yml, or the variables it reads. "
            f"({detail})"
        )
    if "AuthorizationException" in detail:
        return (
            f"does not allow user '{security.username or '?'}' what the query "
            f"needs: ask the brokers' administrators for it ({detail})"
        )
    if "Failed to load SSL keystore" in text or "Failed to load SSL" in text:
        return (
            "could not be reached: Spark's Kafka client did not load the trust or "
            "key store named in the credentials (a path, type or password this "
            f"machine's check passed but Spark's does not: on a cluster, the file "
            f"must be on every machine). ({detail})"
        )
    if "Timeout" in detail:
        return (
            f"did not answer within {timeout:g} s: check that it runs and that "
            "the dataset's kafka.bootstrap.servers is right "
            "(`kafka_connect_timeout` in streaming.yml sets the wait)"
        )
    return f"could not be used. ({detail})"


@contextlib.contextmanager
def _kafka_client_logs_off(spark: SparkSession):
    """Keeps the Kafka client's own log lines (a Java stack per retry) off the
    console while a check provokes them: the check names the cause."""
    if is_remote():  # the server's logs are the server's
        yield
        return
    jvm = spark.sparkContext._jvm
    log4j = jvm.org.apache.logging.log4j
    configurator = log4j.core.config.Configurator
    loggers = ("org.apache.kafka", "org.apache.spark.sql.kafka010")
    previous = {
        logger_name: log4j.LogManager.getLogger(logger_name).getLevel()
        for logger_name in loggers
    }
    for logger_name in loggers:
        configurator.setLevel(logger_name, log4j.Level.OFF)
    try:
        yield
    finally:
        for logger_name, level in previous.items():
            configurator.setLevel(logger_name, level)


def check_before_spark(
    catalog: DataCatalog,
    pipeline: Pipeline,
    settings: dict[str, Any],
    state: StreamState,
    *,
    other_envs=None,
) -> None:
    """The checks that need no Spark: made before the session starts.

    Args:
        other_envs: Returns the names each other environment's catalog
            declares, to say which environment a missing dataset is in
            (read only when one is missing).
    """
    run_trigger(settings)
    check_settings(settings)
    other_envs = other_envs or dict
    check_catalog_has(catalog, pipeline, other_envs)
    sinks = streaming_datasets(catalog, pipeline.all_outputs())
    sources = streaming_datasets(catalog, pipeline.inputs())
    check_streams_have_sinks(catalog, pipeline, {**sources, **sinks}, other_envs)
    check_configuration(sinks, sources)
    check_avro_registries(sources, sinks)
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
            _paths(catalog, pipeline.datasets()), location, env
        )
    timeout = float(settings.get("kafka_connect_timeout", 30))
    for name, dataset in {**sources, **sinks}.items():
        if dataset.file_format == "kafka":
            check_kafka_reachable(spark, name, dataset, timeout)
    check_kafka_topics(
        sources,
        {name: [s for s in sinks if name in sources_of(s)] for name in sources},
        sinks,
    )
    check_avro_package(spark, sources, sinks)
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


def check_kafka_topics(
    sources: dict[str, SparkStreamingDataset],
    readers: dict[str, list[str]],
    sinks: dict[str, SparkStreamingDataset],
) -> None:
    """Fails on a Kafka topic that does not exist, and on a new checkpoint
    that would silently skip what a topic already holds.

    Spark's default for a new checkpoint is ``startingOffsets: latest``: the
    query starts at the topic's end, and the checkpoint keeps that position.
    A subscription to a missing topic fails only once the query runs.

    Args:
        sources: The run's streaming sources.
        readers: Each source's queries (sinks) in this run.
        sinks: The run's streaming sinks.
    """
    problems = []
    for name, dataset in sources.items():
        options = {key.lower(): str(v) for key, v in dataset.load_options.items()}
        topics = _subscribed_topics(options)
        if dataset.file_format != "kafka" or not topics:
            continue
        servers = dataset.kafka_client_config.get("bootstrap.servers", "")
        try:
            held, existing = _topic_messages(dataset, topics)
        except Exception as error:  # noqa: BLE001 (kafka-python's and sockets')
            logger.warning(
                "'%s': the topics %s at %s could not be listed (%s): not checked "
                "before start.",
                name,
                ", ".join(topics),
                servers,
                type(error).__name__,
            )
            continue
        auto_create = options.get("kafka.allow.auto.create.topics", "").lower()
        missing = [topic for topic in topics if topic not in existing]
        refused = _forbidden(dataset, servers, missing)
        user = dataset.kafka_security.username
        for topic in refused:
            problems.append(
                f"'{name}' reads the topic '{topic}', which the brokers at {servers} "
                f"do not let {f'user {user!r}' if user else 'this client'} describe "
                "or read (TOPIC_AUTHORIZATION_FAILED): ask the cluster's "
                "administrators for Describe and Read on it, or fix the topic's name"
            )
        for topic in missing:
            if topic in refused or auto_create == "true":
                continue
            close = difflib.get_close_matches(topic, sorted(existing), n=3, cutoff=0.6)
            problems.append(
                f"'{name}' reads the topic '{topic}', which the brokers at "
                f"{servers} do not have"
                + (
                    f" (closest: {', '.join(repr(t) for t in close)})"
                    if close
                    else f" (they have {len(existing)} topics)"
                )
                + ". Fix the topic's name, or create the topic; to have the brokers "
                "create it when the query subscribes, set "
                "`kafka.allow.auto.create.topics: true` in its load_args"
            )
        waiting = sum(held.values())
        new = [
            q for q in readers.get(name, []) if not has_progress(sinks[q].checkpoint)
        ]
        if (
            waiting
            and new
            and "startingoffsets" not in options
            and "assign" not in options
        ):
            problems.append(
                f"'{name}' would skip the {waiting} messages already in "
                + " and ".join(f"'{t}'" for t in held)
                + f": the new checkpoint of {', '.join(new)} would "
                "start at the topic's end (Spark's default). Say which you mean "
                "in its load_args: `startingOffsets: earliest` to read them, or "
                "`startingOffsets: latest` to skip them knowingly"
            )
    for name, dataset in sinks.items():
        _say_new_sink_topic(name, dataset)
    if problems:
        raise StreamingConfigError(
            "Kafka topics in conf/ cannot be read as configured:\n  - "
            + "\n  - ".join(problems)
        )


def _forbidden(dataset: SparkStreamingDataset, servers: str, topics: list[str]):
    """The topics of ``topics`` the brokers do not let the dataset's client see."""
    if not topics:
        return []
    try:
        return forbidden_topics(servers, dataset.kafka_security, topics)
    except Exception:  # noqa: BLE001 (then only "missing" can be said)
        return []


def _say_new_sink_topic(name: str, dataset: SparkStreamingDataset) -> None:
    """Warns when a Kafka sink writes a topic that the brokers do not have:
    they create it at the first message (a misspelt topic too, and the
    checkpoint then moves on past what went there)."""
    topic = dataset.writer_options.get("topic")
    if dataset.file_format != "kafka" or not topic:
        return
    try:
        _, existing = _topic_messages(dataset, [])
    except Exception:  # noqa: BLE001 (the sources' check says why)
        return
    if topic in existing:
        return
    close = difflib.get_close_matches(str(topic), sorted(existing), n=3, cutoff=0.6)
    logger.warning(
        "'%s' writes to the topic '%s', which the brokers at %s do not have yet: "
        "they create it at its first message%s.",
        name,
        topic,
        dataset.kafka_client_config.get("bootstrap.servers", ""),
        f" (existing topics close to it: {', '.join(close)})" if close else "",
    )


def _subscribed_topics(options: dict[str, str]) -> list[str]:
    """The topics a Kafka source names (not a pattern's)."""
    if "subscribe" in options:
        return [t.strip() for t in options["subscribe"].split(",") if t.strip()]
    if "assign" in options:
        try:
            return sorted(json.loads(options["assign"]))
        except ValueError:
            return []
    return []


def _topic_messages(
    dataset: SparkStreamingDataset, topics: list[str]
) -> tuple[dict[str, int], set[str]]:
    """The messages each existing topic of ``topics`` holds, and every
    topic the brokers have."""
    from kafka import TopicPartition  # noqa: PLC0415

    with (
        kafka_python_logs(),
        contextlib.closing(offsets_reader(dataset)) as consumer,
    ):
        existing = consumer.topics()
        partitions = [
            TopicPartition(topic, partition)
            for topic in topics
            if topic in existing
            for partition in consumer.partitions_for_topic(topic) or ()
        ]
        first = consumer.beginning_offsets(partitions)
        last = consumer.end_offsets(partitions)
    held: dict[str, int] = {}
    for partition in partitions:
        held[partition.topic] = held.get(partition.topic, 0) + (
            last[partition] - first[partition]
        )
    return {topic: count for topic, count in held.items() if count}, existing


def offsets_reader(dataset: SparkStreamingDataset):
    """A kafka-python consumer of ``dataset``'s brokers, for the runtime's own
    reads of topics and offsets: no group, so nothing to commit (and no
    warning from kafka-python about it).

    Raises:
        SaslAuthenticationFailedError: At once, the brokers refuse the login
            (kafka-python alone would retry it for 30 s).
    """
    from kafka import KafkaConsumer  # noqa: PLC0415
    from kafka.errors import SaslAuthenticationFailedError  # noqa: PLC0415

    config = dataset.kafka_python_config
    refused = login_problem(config["bootstrap_servers"] or "", dataset.kafka_security)
    if refused:
        raise SaslAuthenticationFailedError(refused)
    return KafkaConsumer(**config, request_timeout_ms=5000, enable_auto_commit=False)


def has_progress(checkpoint: str | None) -> bool:
    """Whether a query has run on ``checkpoint`` (it has an offsets log)."""
    if not checkpoint:
        return False
    fs, root = fsspec.core.url_to_fs(checkpoint)
    offsets = f"{root}/offsets"
    return fs.exists(offsets) and bool(fs.ls(offsets, detail=False))


def source_position(checkpoint: str | None) -> list[str]:
    """Where a query's sources stand: the source lines of its checkpoint's
    last offsets file (Kafka offsets, a file source's log offset); empty
    for a new checkpoint."""
    if not has_progress(checkpoint):
        return []
    fs, root = fsspec.core.url_to_fs(checkpoint)
    batches = [
        entry.rstrip("/").rsplit("/", 1)[-1]
        for entry in fs.ls(f"{root}/offsets", detail=False)
    ]
    last = max((int(b) for b in batches if b.isdigit()), default=None)
    if last is None:
        return []
    lines = fs.cat_file(f"{root}/offsets/{last}").decode().splitlines()
    return [line for line in lines[2:] if line.strip()]


def check_catalog_has(catalog: DataCatalog, pipeline: Pipeline, other_envs) -> None:
    """Fails on a pipeline input that the run's catalog does not have,
    naming the environments whose catalog declares it.

    Kedro itself would fail only after the SparkSession has started, naming
    no environment.
    """
    missing = sorted(name for name in pipeline.inputs() if name not in catalog)
    if not missing:
        return
    lines, declared = [], other_envs()
    known = [key for key in catalog.keys() if key.startswith("params:")]  # noqa: SIM118
    for name in [n for n in missing if n.startswith("params:")]:
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        lines.append(
            f"'{name}': no parameter {name.removeprefix('params:')} in "
            "conf/<env>/parameters*.yml"
            + (f": did you mean '{close[0]}'?" if close else "")
        )
    missing = [n for n in missing if not n.startswith("params:")]
    for name in missing:
        envs = sorted(env for env, names in declared.items() if name in names)
        lines.append(
            f"'{name}': declared in "
            + " and ".join(f"conf/{env}/catalog.yml" for env in envs)
            + ": run with "
            + " or ".join(f"`--env {env}`" for env in envs)
            if envs
            else f"'{name}': no environment declares it: add it to "
            "conf/base/catalog.yml (or the environment's catalog.yml)"
        )
    raise StreamingConfigError(
        "The pipeline reads what this environment does not declare:\n  - "
        + "\n  - ".join(lines)
    )


def catalog_names_by_env(config_loader) -> dict[str, Any]:
    """The dataset names (and factory patterns, as patterns) each other
    environment's catalog declares, by environment.

    Args:
        config_loader: The run's configuration loader.
    """
    from kedro.io.catalog_config_resolver import CatalogConfigResolver  # noqa: PLC0415

    found = {}
    env = config_loader.env
    root = Path(str(config_loader.conf_source))
    for folder in (
        sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    ):
        if folder.name in ("base", env) or not any(folder.glob("catalog*")):
            continue
        try:
            config = _loader_like(config_loader, env=folder.name)["catalog"]
        except Exception as error:  # noqa: BLE001 (another env's broken conf)
            logger.debug("conf/%s's catalog not read: %s", folder.name, error)
            continue
        found[folder.name] = _Declared(config, CatalogConfigResolver)
    return found


def _loader_like(config_loader, **changes: Any):
    """A configuration loader as the project's settings make one, over the
    same ``conf/`` as ``config_loader``, with its env and runtime params
    unless ``changes`` gives others."""
    from kedro.framework.project import settings  # noqa: PLC0415

    arguments = {
        "conf_source": str(config_loader.conf_source),
        "env": config_loader.env,
        "runtime_params": config_loader.runtime_params,
        **changes,
    }
    return settings.CONFIG_LOADER_CLASS(**arguments, **settings.CONFIG_LOADER_ARGS)


class _Declared:
    """The names an environment's catalog declares, patterns included."""

    def __init__(self, config: dict[str, Any], resolver_class) -> None:
        self._names = {k for k in config if not k.startswith("_")}
        self._patterns = [k for k in self._names if resolver_class.is_pattern(k)]

    def __contains__(self, name: str) -> bool:
        from parse import parse  # noqa: PLC0415 (Kedro's own pattern matcher)

        return name in self._names or any(parse(p, name) for p in self._patterns)


def headline(error: BaseException, limit: int = 1000) -> str:
    """The first line of Spark's message, without the query plan that follows.

    Where that line only introduces its cause (Spark's "Exception thrown in
    awaitResult:"), the cause's first line follows it.
    """
    text, cause = _first_line(error), error
    while text.endswith(":"):
        cause = getattr(cause, "_cause", None) or cause.__cause__
        if cause is None:
            break
        text = f"{text} {_first_line(cause)}"
    return text if len(text) <= limit else text[:limit] + "..."


def _first_line(error: BaseException) -> str:
    # Without control characters: Spark quotes binary files' bytes (a NUL
    # makes grep call a log binary).
    text = "".join(c if c.isprintable() or c == "\n" else " " for c in str(error))
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


def streaming_datasets(
    catalog: DataCatalog, names: set[str]
) -> dict[str, SparkStreamingDataset]:
    datasets = {}
    for name in sorted(names):
        if name in catalog:
            dataset = catalog[name]
            if isinstance(dataset, SparkStreamingDataset):
                datasets[name] = dataset
    return datasets


def query_sources(
    catalog: DataCatalog, pipeline: Pipeline, sink: str
) -> dict[str, SparkStreamingDataset]:
    """The streaming datasets the sink's query reads: the graph back from the
    sink through in-memory datasets, up to streaming datasets."""
    producers = {output: node for node in pipeline.nodes for output in node.outputs}
    sources, stack, seen = {}, [sink], set()
    while stack:
        node = producers.get(stack.pop())
        if node is None or node.name in seen:
            continue
        seen.add(node.name)
        for name in node.inputs:
            dataset = catalog[name] if name in catalog else None
            if isinstance(dataset, SparkStreamingDataset):
                sources[name] = dataset
            else:
                stack.append(name)
    return sources


def query_nodes(catalog: DataCatalog, pipeline: Pipeline, sink: str) -> list[str]:
    """The nodes a sink's query runs: back from the sink through in-memory
    datasets, up to streaming datasets (which another query writes)."""
    producers = {output: node for node in pipeline.nodes for output in node.outputs}
    found, stack = [], [sink]
    while stack:
        node = producers.get(stack.pop())
        if node is None or node.name in found:
            continue
        found.append(node.name)
        stack.extend(
            name
            for name in node.inputs
            if not isinstance(
                catalog[name] if name in catalog else None, SparkStreamingDataset
            )
        )
    return found


def fan_out(catalog: DataCatalog, pipeline: Pipeline, sinks: list[str]) -> list[str]:
    """Says which queries of a run each read the same sources through the
    same nodes: each query reads its sources and runs those nodes on its own,
    so the source is read, and every record parsed and checked, once per
    query."""
    nodes = {sink: query_nodes(catalog, pipeline, sink) for sink in sinks}
    groups: dict[tuple[str, ...], list[str]] = {}
    for sink in sinks:
        for other in sinks:
            shared = tuple(n for n in reversed(nodes[sink]) if n in nodes[other])
            if other > sink and shared:
                groups.setdefault(shared, []).extend([sink, other])
    lines = []
    for shared, pairs in groups.items():
        queries = sorted(set(pairs))
        sources = sorted(
            set().union(*(query_sources(catalog, pipeline, q) for q in queries))
            & set(
                name
                for node in pipeline.nodes
                if node.name in shared
                for name in node.inputs
            )
        )
        lines.append(
            f"queries {', '.join(queries)} each read {', '.join(sources) or 'their sources'} "
            f"and run {', '.join(shared)} on their own: {len(queries)} reads of the "
            "source and checks of every record. To read and check once, write the "
            "shared output to a sink and read that sink (docs/operating.md, "
            '"One source, several sinks")'
        )
    return lines


def _paths(catalog: DataCatalog, names: set[str]) -> dict[str, list[str]]:
    """The folders and checkpoints of the runtime's datasets among ``names``."""
    paths = {}
    for name in names:
        dataset = catalog[name] if name in catalog else None
        if isinstance(dataset, SparkStreamingDataset):
            paths[name] = [p for p in (dataset.path, dataset.checkpoint) if p]
        elif isinstance(dataset, SparkDataset):
            paths[name] = [dataset.path]
    return paths
