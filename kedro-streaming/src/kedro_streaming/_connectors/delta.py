"""Delta Lake tables: the package check, exactly-once upserts, table care.

Optional (an environment's ``spark.yml`` adds the package, as conf/delta does);
plain Spark SQL, so it works on any master and over Spark Connect.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import fsspec
from pyspark.sql import DataFrame, SparkSession

from kedro_streaming._checkpoint import Checkpoint
from kedro_streaming._connectors.base import Connector, Entry
from kedro_streaming._connectors.changes import (
    Changes,
    changes_problems,
    column_problems,
)
from kedro_streaming._connectors.files import missing_local_folder
from kedro_streaming._connectors.scd import (
    create_target,
    keep_changes,
    table_schema,
)
from kedro_streaming._connectors.scd_sql import idempotent
from kedro_streaming.errors import StreamingConfigError
from kedro_streaming.problems import Problem

if TYPE_CHECKING:
    from pyspark.sql.streaming import DataStreamWriter, StreamingQuery
    from pyspark.sql.types import StructType

    from kedro_streaming._connectors.options import OptionNames

# Named as before 0.7.0: projects' logging.yml may set its level.
logger = logging.getLogger("kedro_streaming.delta")

DELTA_FORMAT = "delta"
# The Spark minor version each Delta release line is built on, for the
# artifacts without a Spark line in their name (io.delta:delta-spark_2.13):
# the spark-sql dependency in their POMs on Maven Central.
DELTA_BUILT_FOR = {
    "3.0": "3.5",
    "3.1": "3.5",
    "3.2": "3.5",
    "3.3": "3.5",
    "4.0": "4.0",
    "4.1": "4.1",
    "4.2": "4.1",
    "4.3": "4.1",
    "4.4": "4.2",
}
# Since Delta 4.1, each release is also published once per Spark line, with
# the line in the artifact's name (io.delta:delta-spark_4.1_2.13): the newest
# release and the Spark lines it is published for.
NEWEST_DELTA = "4.4.0"
NEWEST_DELTA_SPARK_LINES = ("4.0", "4.1", "4.2")
_DELTA_PACKAGE = re.compile(
    r"io\.delta:delta-spark(?:_(?P<line>\d+\.\d+))?_(?P<scala>\d+\.\d+):"
    r"(?P<version>[^:,\s]+)"
)
_FIX = "set spark.jars.packages in the environment's spark.yml to"
_DELTA_OPTIONS = "org.apache.spark.sql.delta.DeltaOptions$"


class Delta(Connector):
    """Delta tables: a source's table, a sink's upserts by key (``merge_on``,
    exactly once), its options and version."""

    name = "delta"
    formats = (DELTA_FORMAT,)
    label = "Delta"
    takes_schema = False
    keeps_schema = True
    self_describing = True
    only_appends = True
    upserts = True

    def check_package(
        self, packages: str, spark_version: str, scala: str | None, fix: str | None
    ) -> None:
        check_delta_package(packages, spark_version, scala, fix)

    def source_problems(self, entry: Entry) -> list[Problem]:
        missing = missing_local_folder(entry.path)
        return [missing] if missing else []

    def sink_problems(self, entry: Entry) -> list[Problem]:
        changes = entry.sink.changes
        return [] if changes is None else changes_problems(changes)

    def data_problems(self, entry: Entry, data: DataFrame) -> list[Problem]:
        changes = entry.sink.changes
        if changes is None or changes_problems(changes):
            return []
        return column_problems(Changes.parse(changes), data.columns)

    def table_schema(self, entry: Entry, written: StructType) -> StructType:
        changes = entry.sink.changes
        if changes is None or changes_problems(changes):
            return written
        return table_schema(Changes.parse(changes), written)

    def option_names(self, names: OptionNames, direction: str) -> list[str] | None:
        return [
            *names.scala_set(_DELTA_OPTIONS, "validOptionKeys"),
            *names.constants(_DELTA_OPTIONS),
        ]

    def writer(self, entry: Entry, writer: DataStreamWriter) -> DataStreamWriter:
        # Columns the query adds (checked before it starts: nothing else
        # changes) join the table's schema.
        return writer.option("mergeSchema", "true")

    def start(
        self, entry: Entry, writer: DataStreamWriter, data: DataFrame
    ) -> StreamingQuery:
        if entry.sink.changes is not None:
            return _keep_changes(entry, writer, data)
        merge_on = entry.sink.merge_on
        if not merge_on:
            return super().start(entry, writer, data)
        create_delta_table(data.sparkSession, entry.path, data)
        upsert = upsert_batches(entry.path, merge_on, entry.checkpoint)
        return writer.foreachBatch(upsert).start()

    def holds_data(self, entry: Entry) -> bool:
        return bool(entry.path) and table_version(entry.path) is not None

    def batch_output(
        self, spark: SparkSession, entry: Entry, query_id: str, batch: int
    ) -> DataFrame | None:
        if entry.sink.changes is not None or entry.sink.merge_on or not entry.path:
            return None  # upserts: a version holds more than the batch's rows
        version = batch_version(entry.path, query_id, batch)
        if version is None:
            return None
        table = spark.read.format(DELTA_FORMAT)
        after = table.option("versionAsOf", version).load(entry.path)
        if version == 0:
            return after
        return after.exceptAll(
            table.option("versionAsOf", version - 1).load(entry.path)
        )

    def sink_figures(self, entry: Entry) -> list[str]:
        version = table_version(entry.path)
        return ["no Delta table yet" if version is None else f"Delta version {version}"]


def _keep_changes(
    entry: Entry, writer: DataStreamWriter, data: DataFrame
) -> StreamingQuery:
    name = entry.sink.query_name or entry.path.rstrip("/").rsplit("/", 1)[-1]
    apply = changes_applier(
        data, entry.path, Changes.parse(entry.sink.changes), name, entry.checkpoint
    )
    return writer.foreachBatch(apply).start()


def changes_applier(
    data: DataFrame, path: str, spec: Changes, name: str, checkpoint: str
) -> Callable[[DataFrame, int], None]:
    """The ``foreachBatch`` function keeping ``data``'s changes in the Delta
    table at ``path`` (made now, unless it is there), for the query of
    ``checkpoint``; its log lines say ``name``."""
    new = create_target(data.sparkSession, path, spec, data)
    ids: list[str] = []

    def query_id() -> str:  # known once the query has started
        if not ids:
            ids.append(checkpoint_query_id(checkpoint))
        return ids[0]

    return keep_changes(path, spec, name, query_id, new)


def delta_package_for(spark_version: str, scala_version: str = "2.13") -> str | None:
    """The newest Delta package built for this Spark's line, ``None`` if none is.

    Example:
        >>> from kedro_streaming import delta_package_for
        >>> delta_package_for("4.1.1")  # spark.jars.packages of conf/delta/spark.yml
        'io.delta:delta-spark_4.1_2.13:4.4.0'
        >>> delta_package_for("3.5.3")
        'io.delta:delta-spark_2.13:3.3.0'
    """
    line = spark_line(spark_version)
    if line in NEWEST_DELTA_SPARK_LINES:
        return f"io.delta:delta-spark_{line}_{scala_version}:{NEWEST_DELTA}"
    older = [v for v, built in DELTA_BUILT_FOR.items() if built == line]
    if older:
        newest = max(older, key=version_key)
        return f"io.delta:delta-spark_{scala_version}:{newest}.0"
    return None


def spark_line(version: str) -> str:
    """The line (major.minor) of a Spark version: ``4.1.1`` -> ``4.1``."""
    return ".".join(version.split(".")[:2])


def check_delta_package(
    packages: str,
    spark_version: str,
    scala_version: str | None,
    fix: str | None = None,
) -> None:
    """Fails unless the Delta package in ``packages`` (``spark.jars.packages``)
    fits this Spark: on another line, Delta fails at its first table.

    Example:
        >>> from kedro_streaming import check_delta_package
        >>> check_delta_package("io.delta:delta-spark_4.1_2.13:4.4.0", "4.1.1", "2.13")
        >>> check_delta_package("io.delta:delta-spark_4.1_2.13:4.4.0", "4.2.0", "2.13")
        Traceback (most recent call last):
          ...
        kedro_streaming.errors.StreamingConfigError: spark.yml asks for the Delta
        package io.delta:delta-spark_4.1_2.13:4.4.0, built for Spark 4.1, but the
        running Spark is 4.2.0 ... to io.delta:delta-spark_4.2_2.13:4.4.0 (...).
    """
    match = _DELTA_PACKAGE.search(packages)
    if match is None:
        return
    built_for = match["line"] or DELTA_BUILT_FOR.get(spark_line(match["version"]))
    wrong_scala = scala_version is not None and match["scala"] != scala_version
    if built_for is None:
        logger.warning(
            "Cannot check that %s fits Spark %s: this project knows Delta up to %s.",
            match[0],
            spark_version,
            NEWEST_DELTA,
        )
    if (
        built_for is None or built_for == spark_line(spark_version)
    ) and not wrong_scala:
        return
    right = delta_package_for(spark_version, scala_version or match["scala"])
    advice = (
        f"{right} (https://docs.delta.io/latest/releases.html)"
        if right
        else f"a Delta release built for Spark {spark_line(spark_version)}; this "
        f"project knows none (https://docs.delta.io/latest/releases.html)"
    )
    raise StreamingConfigError(
        f"spark.yml asks for the Delta package {match[0]}"
        + (f", built for Spark {built_for}" if built_for else "")
        + f", but the running Spark is {spark_version}"
        + (f" built for Scala {scala_version}" if scala_version else "")
        + f". Fix: {fix or _FIX} {advice}."
    )


def version_key(line: str) -> tuple[int, ...]:
    """A version (or line) as numbers, to compare: ``4.10`` after ``4.9``."""
    return tuple(int(part) for part in line.split("."))


def upsert_batches(
    path: str, keys: list[str], checkpoint: str
) -> Callable[[DataFrame, int], None]:
    """A ``foreachBatch`` function that MERGEs each micro-batch into a Delta table.

    Each MERGE carries the query's id and the batch id as Delta's idempotent
    write pair, so a batch replayed after its commit is skipped: exactly once.
    """
    condition = " AND ".join(f"t.`{key}` <=> s.`{key}`" for key in keys)
    query_ids: dict[str, str] = {}

    def upsert(batch: DataFrame, batch_id: int) -> None:
        spark = batch.sparkSession
        if checkpoint not in query_ids:
            query_ids[checkpoint] = checkpoint_query_id(checkpoint)
        view = f"upserts_{query_ids[checkpoint].replace('-', '_')}"
        # Every partition is computed even when Delta skips a replayed MERGE:
        # else a stateful query never commits its state (Spark 4.2:
        # STATE_STORE_COMMIT_VALIDATION_FAILED).
        batch.persist()
        batch.count()
        batch.createOrReplaceTempView(view)
        try:
            with idempotent(spark, query_ids[checkpoint], batch_id):
                # Without evolution, MERGE would drop the query's new columns
                # silently.
                spark.sql(
                    f"MERGE WITH SCHEMA EVOLUTION INTO delta.`{path}` AS t USING "
                    f"{view} AS s ON {condition} "
                    "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
                )
        finally:
            spark.catalog.dropTempView(view)
            batch.unpersist()

    return upsert


def create_delta_table(spark: SparkSession, path: str, data: DataFrame) -> None:
    """Creates an empty Delta table with ``data``'s columns, unless there is one."""
    spark.createDataFrame([], data.schema).write.format(DELTA_FORMAT).mode(
        "ignore"
    ).save(path)


def table_version(path: str) -> int | None:
    """The latest version of the Delta table at ``path`` (from its log), or None."""
    fs, root = fsspec.core.url_to_fs(path)
    log = f"{root}/_delta_log"
    if not fs.exists(log):
        return None
    versions = [
        int(name.rsplit("/", 1)[-1].split(".")[0])
        for name in fs.ls(log, detail=False)
        if name.endswith(".json") and name.rsplit("/", 1)[-1].split(".")[0].isdigit()
    ]
    return max(versions) if versions else None


def batch_version(path: str, query_id: str, batch: int) -> int | None:
    """The table version in which query ``query_id`` wrote ``batch``: Delta's
    streaming sink commits each batch with a ``txn`` of the query's id and
    the batch's; ``None`` if the log no longer has its commit."""
    fs, root = fsspec.core.url_to_fs(path)
    newest = table_version(path)
    for version in range(newest if newest is not None else -1, -1, -1):
        commit = f"{root}/_delta_log/{version:020d}.json"
        if not fs.exists(commit):
            return None  # older commits cleaned up (log retention)
        for line in fs.cat_file(commit).decode().splitlines():
            txn = json.loads(line).get("txn") if line.strip() else None
            if txn and txn.get("appId") == query_id:
                if txn.get("version") == batch:
                    return version
                if txn.get("version", batch) < batch:
                    return None  # the query's earlier batches: not written
    return None


def optimize(spark: SparkSession, path: str) -> dict[str, Any]:
    """Compacts the table's small files (``OPTIMIZE``); returns Delta's metrics.

    Safe while streams use the table: its commit changes no data.
    """
    row = spark.sql(f"OPTIMIZE delta.`{path}`").collect()[0]
    metrics = row["metrics"].asDict()
    return {key: metrics[key] for key in ("numFilesAdded", "numFilesRemoved")}


def vacuum(spark: SparkSession, path: str, retain_hours: float) -> int:
    """Deletes files unused for more than ``retain_hours`` (``VACUUM``, which
    ends time travel past it); returns how many it deleted."""
    before = _data_files(path)
    spark.sql(f"VACUUM delta.`{path}` RETAIN {retain_hours:g} HOURS").collect()
    return len(before - _data_files(path))


def _data_files(path: str) -> set[str]:
    fs, root = fsspec.core.url_to_fs(path)
    return {
        name
        for name in fs.find(root)
        if "/_delta_log/" not in name and name.endswith(".parquet")
    }


def checkpoint_query_id(checkpoint: str) -> str:
    """The id Spark gave the query of ``checkpoint`` (in its ``metadata`` file)."""
    query_id = Checkpoint(checkpoint).query_id()
    if query_id is None:
        raise FileNotFoundError(f"{checkpoint.rstrip('/')}/metadata")
    return query_id
