"""A sink's committed schema, and its checkpoint's state schemas, against what
its query will write and keep, before it starts.

An added column is noted; a dropped or retyped one is refused (readers could
no longer combine old and new files), as is a state that differs (Spark would
fail, or mix old groups with new). Nullability is not compared: sinks store
every column as nullable.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import fsspec
from py4j.protocol import Py4JError
from pyspark.sql import DataFrame
from pyspark.sql.types import DataType, StructField, StructType, TimestampType
from pyspark.sql.utils import AnalysisException

from kedro_streaming._checkpoint import Checkpoint
from kedro_streaming._connectors.streams import as_nullable
from kedro_streaming._spark import java_frame, jvm_of, plan_nodes

# Spark's physical operators that keep state, by class name.
_STATEFUL_OPERATORS = (
    "StateStoreSaveExec",
    "SessionWindowStateStoreSaveExec",
    "StreamingDeduplicateExec",
    "StreamingDeduplicateWithinWatermarkExec",
)


@dataclass
class SchemaCheck:
    """What a sink's check found: notes to log, problems that refuse the run."""

    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def check_sink_schema(name: str, dataset: Any, frame: DataFrame) -> SchemaCheck:
    """Compares sink ``name``'s committed schema and state with what ``frame``
    would write and keep: one line per note or problem."""
    check = SchemaCheck()
    committed = committed_schema(dataset, frame.sparkSession)
    if isinstance(committed, str):
        check.problems.append(f"{committed}. Fix: {reset_fix(name)}")
    elif committed is not None:
        partitions = _partition_columns(dataset)
        written = dataset.connector.table_schema(dataset, frame.schema)
        added, changed = compare_schemas(
            _without(committed, partitions), _without(written, partitions)
        )
        if changed:
            check.problems.append(
                "would no longer match its committed files: "
                f"{'; '.join(changed)}. Fix: keep the committed columns and types "
                "in the node that writes it (or in the schema it parses by, e.g. "
                f"a parameter), or {reset_fix(name)}"
            )
        if added:
            check.notes.append(
                f"gains {', '.join(added)}: accepted (rows written before "
                "read it as null)"
            )
    state = state_problem(dataset.checkpoint, frame)
    if state:
        check.problems.append(
            f"keeps state its checkpoint cannot resume: {state}. Fix: {reset_fix(name)}"
        )
    return check


def reset_fix(name: str) -> str:
    """How to start sink ``name``'s query afresh."""
    return (
        f"`kedro streams reset {name}` (removes its table and checkpoint, and "
        "those of the streams that read it: the next run writes them all "
        "again), or write to a new table (another filepath and checkpoint)"
    )


def committed_schema(dataset: Any, spark) -> StructType | str | None:
    """The schema of the sink's committed data, ``None`` if none is known, or
    a string saying why its files cannot be read as one table."""
    path, connector = dataset.path, dataset.connector
    if not path or dataset.foreach_batch or not dataset.checkpoint:
        return None
    if not connector.self_describing or not connector.holds_data(dataset):
        return None
    reader = spark.read.format(dataset.file_format)
    if not connector.keeps_schema:
        # The batch reader lists only the files the `_spark_metadata` log
        # commits; merging reads every footer, not only the first file's.
        reader = reader.option("mergeSchema", "true")
    try:
        return reader.load(path).schema
    except AnalysisException as error:
        message = str(error)
        if "UNABLE_TO_INFER_SCHEMA" in message or "PATH_NOT_FOUND" in message:
            return None
        if "CANNOT_MERGE" in message or "merge incompatible" in message:
            return (
                "has committed files whose types already disagree "
                f"({message.splitlines()[0].strip()})"
            )
        raise


def compare_schemas(
    committed: StructType, written: StructType, prefix: str = ""
) -> tuple[list[str], list[str]]:
    """The columns ``written`` adds, and how it changes or drops committed ones
    (nested fields included; names compared ignoring case, as Spark does)."""
    added, changed = [], []
    new = {f.name.lower(): f for f in written.fields}
    old = {f.name.lower() for f in committed.fields}
    for before in committed.fields:
        column = f"{prefix}{before.name}"
        after = new.get(before.name.lower())
        if after is None:
            changed.append(f"column {column} ({_type(before)}) is no longer written")
        elif isinstance(before.dataType, StructType) and isinstance(
            after.dataType, StructType
        ):
            inner_added, inner_changed = compare_schemas(
                before.dataType, after.dataType, f"{column}."
            )
            added += inner_added
            changed += inner_changed
        elif not _same_type(before.dataType, after.dataType):
            changed.append(
                f"column {column} was {_type(before)}, is now {_type(after)}"
            )
    added += [
        f"column {prefix}{f.name} ({_type(f)})"
        for f in written.fields
        if f.name.lower() not in old
    ]
    return added, changed


def _type(column: StructField) -> str:
    return column.dataType.simpleString()


def _same_type(left: DataType, right: DataType) -> bool:
    """Equal but for nullability, at any depth."""
    return as_nullable(left) == as_nullable(right)


def _partition_columns(dataset: Any) -> set[str]:
    """The sink's partitionBy columns: folder names, not file columns."""
    columns = dataset.partition_by or []
    return {c.lower() for c in ([columns] if isinstance(columns, str) else columns)}


def _without(schema: StructType, columns: set[str]) -> StructType:
    return StructType([f for f in schema.fields if f.name.lower() not in columns])


def state_problem(checkpoint: str | None, frame: DataFrame) -> str | None:
    """How ``frame``'s state would differ from ``checkpoint``'s, if it does."""
    if not checkpoint:
        return None
    # Counted by folder: a join keeps its schemas a level down
    # (state/<id>/<partition>/<side>), where none is read here.
    recorded = recorded_operator_count(checkpoint)
    if not recorded and Checkpoint(checkpoint).committed is None:
        return None  # nothing committed: the query starts afresh
    planned = planned_state_schemas(frame)
    if planned is None:  # Spark Connect: no plan to read here
        return None
    if len(planned) != recorded:
        return (
            f"its checkpoint holds the state of {recorded} stateful "
            f"operator(s), and the query now has {len(planned)}"
            + (f" ({', '.join(kind for kind, _, _ in planned)})" if planned else "")
        )
    stored = recorded_state_schemas(checkpoint)
    for operator, (kind, keys, values) in enumerate(planned):
        if operator not in stored or keys is None:
            continue
        old_keys, old_values = stored[operator]
        for part, old, new in (("key", old_keys, keys), ("value", old_values, values)):
            if new is None or _same_state(old, new):
                continue
            return (
                f"its {kind} (operator {operator}) kept the state {part} "
                f"{_columns(old)}, and would now keep {_columns(new)}"
            )
    return None


def _same_state(old: StructType, new: StructType) -> bool:
    return [f.name.lower() for f in old] == [f.name.lower() for f in new] and all(
        _same_type(a.dataType, b.dataType) for a, b in zip(old, new, strict=True)
    )


def _columns(schema: StructType) -> str:
    return (
        "(" + ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in schema) + ")"
    )


def recorded_operator_count(checkpoint: str) -> int:
    """How many stateful operators ``<checkpoint>/state`` has a folder for."""
    return len(Checkpoint(checkpoint).state_operators())


def recorded_state_schemas(checkpoint: str) -> dict[int, tuple[StructType, StructType]]:
    """Per stateful operator id, the key and value schemas Spark 4.x recorded
    in ``<checkpoint>/state/<id>/0/_metadata/schema`` (``writeUTF`` strings:
    the version, then key and value JSON, in ``v2`` each as counted chunks)."""
    fs, root = fsspec.core.url_to_fs(f"{checkpoint.rstrip('/')}/state")
    found = {}
    for operator in Checkpoint(checkpoint).state_operators():
        schema_file = f"{root}/{operator}/0/_metadata/schema"
        if not fs.exists(schema_file):
            continue
        parsed = _schema_file(fs.cat_file(schema_file))
        if parsed is not None:
            found[operator] = parsed
    return found


def _schema_file(content: bytes) -> tuple[StructType, StructType] | None:
    at = 0

    def utf() -> str:
        nonlocal at
        length = int.from_bytes(content[at : at + 2], "big")
        at += 2 + length
        return content[at - length : at].decode()

    def chunks() -> str:
        nonlocal at
        count = int.from_bytes(content[at : at + 4], "big")
        at += 4
        return "".join(utf() for _ in range(count))

    version = utf()
    if version == "v1":
        key, value = utf(), utf()
    elif version == "v2":
        key, value = chunks(), chunks()
    else:  # another layout (a later Spark's): not compared
        return None
    return StructType.fromJson(json.loads(key)), StructType.fromJson(json.loads(value))


def planned_state_schemas(
    frame: DataFrame,
) -> list[tuple[str, StructType | None, StructType | None]] | None:
    """The stateful operators of ``frame``'s plan, in Spark's order, each with
    its state's key and value schemas where known."""
    jdf = java_frame(frame)
    if jdf is None:
        return None
    jvm = jvm_of(frame.sparkSession)
    found: list[tuple[str, StructType | None, StructType | None]] = []

    def schema(attributes) -> StructType:
        json_text = (
            jvm.org.apache.spark.sql.catalyst.types.DataTypeUtils.fromAttributes(
                attributes
            ).json()
        )
        return StructType.fromJson(json.loads(json_text))

    # executedPlan is refused outside a started query; explain() plans it as a
    # micro-batch would. If that fails, the query's start says why.
    writer = _state_writer_class(jvm)
    try:
        plan = jdf.queryExecution().queryExecutionForExplain().executedPlan()
    except Py4JError:
        return None
    if writer is None:
        return None
    for node in plan_nodes(plan):
        if not writer.isInstance(node):
            continue
        name = node.getClass().getSimpleName()
        keys = values = None
        if name in _STATEFUL_OPERATORS:
            keys = schema(node.keyExpressions())
        if name == "StateStoreSaveExec":
            key_names = {f.name for f in keys} if keys else set()
            child = schema(node.child().output())
            values = StructType([f for f in child if f.name not in key_names])
        elif name == "SessionWindowStateStoreSaveExec":
            # Spark keeps each session under its keys and its start, with the
            # whole row (its keys and window among it) as the value.
            keys = StructType([*keys, StructField("sessionStartTime", TimestampType())])
            values = schema(node.child().output())
        found.append((_KINDS.get(name, name), keys, values))
    return found


_KINDS = {
    "StateStoreSaveExec": "aggregation",
    "SessionWindowStateStoreSaveExec": "session window aggregation",
    "StreamingDeduplicateExec": "deduplication",
    "StreamingDeduplicateWithinWatermarkExec": "deduplication",
    "StreamingSymmetricHashJoinExec": "stream-stream join",
}


# Spark's trait of the operators that write state, by Spark line (4.2 moved
# it); a restore only reads the state its save writes.
_STATE_WRITERS = (
    "org.apache.spark.sql.execution.streaming.operators.stateful.StateStoreWriter",
    "org.apache.spark.sql.execution.streaming.StateStoreWriter",
)


def _state_writer_class(jvm):
    for name in _STATE_WRITERS:
        try:
            return jvm.java.lang.Class.forName(name)
        except Py4JError:
            continue
    return None
