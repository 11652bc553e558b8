"""What a query keeps in its state, read from its checkpoint with Spark's
state data source (``statestore``, ``state-metadata``): each stateful
operator, its rows by key at a batch, and what changed between two batches.

Spark reads the files while the query runs or after; nothing is written.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType

# A join keeps each side's rows; its operator's stores are named after them.
JOIN = "symmetricHashJoin"
JOIN_SIDES = ("left", "right")
# Spark's internal setting of a stateful query's partitions (see state_rows).
_PARTITIONS = "spark.sql.streaming.internal.stateStore.partitions"


@dataclass(frozen=True)
class StateOperator:
    """One stateful operator of a checkpoint, as ``state-metadata`` has it.

    Attributes:
        id: Spark's operator id (``state/<id>`` in the checkpoint).
        name: Spark's operator name (``stateStoreSave``, ``dedupe``,
            ``symmetricHashJoin``, ``transformWithStateExec``...).
        partitions: The state's partitions (the checkpoint's shuffle
            partitions).
        first_batch, last_batch: The batches whose state the checkpoint keeps.
        variables: ``transformWithState``'s state variables, by name.
    """

    id: int
    name: str
    partitions: int
    first_batch: int
    last_batch: int
    variables: tuple[str, ...] = field(default=())

    @property
    def parts(self) -> tuple[str | None, ...]:
        """What of it ``state_rows`` reads one at a time: a join's sides, a
        processor's variables, else the whole operator (``None``)."""
        if self.name == JOIN:
            return JOIN_SIDES
        return self.variables or (None,)


def state_operators(spark: SparkSession, checkpoint: str) -> list[StateOperator]:
    """The stateful operators whose state ``checkpoint`` keeps, by id."""
    _coordinator(spark)
    found: dict[int, StateOperator] = {}
    with readable(checkpoint) as location:
        rows = spark.read.format("state-metadata").load(location).collect()
    for row in rows:
        properties = json.loads(row.operatorProperties or "{}")
        # Spark's own variables ($procTimers_..., $ttl_...): timers are read
        # with `timers`, the rest is Spark's bookkeeping.
        variables = tuple(
            name
            for v in properties.get("stateVariables") or []
            if not (name := v.get("stateName", "")).startswith("$")
        )
        found.setdefault(
            row.operatorId,
            StateOperator(
                row.operatorId,
                row.operatorName,
                row.numPartitions,
                row.minBatchId,
                row.maxBatchId,
                variables,
            ),
        )
    return [found[key] for key in sorted(found)]


def state_rows(  # noqa: PLR0913 (what to read: the operator, its part, when)
    spark: SparkSession,
    checkpoint: str,
    operator: StateOperator,
    *,
    part: str | None = None,
    batch: int | None = None,
    since: int | None = None,
    timers: bool = False,
) -> DataFrame:
    """The state of ``operator`` after ``batch`` (its last by default), to
    read within ``readable(checkpoint)``: one
    row per key, its ``key`` and ``value`` columns flattened (``key.borough``),
    and ``partition_id``. ``part``: a join's side or a processor's variable
    (see ``StateOperator.parts``). ``since``: what changed after that batch,
    up to ``batch``: one row per change, with ``batch_id`` and
    ``change_type`` (``update``, ``delete``). ``timers``: a processor's
    registered timers instead of its values."""
    _coordinator(spark)
    reader = spark.read.format("statestore").option("operatorId", operator.id)
    if timers:  # a processor's timers, apart from its variables
        reader = reader.option("readRegisteredTimers", "true")
    elif operator.name == JOIN and part:
        reader = reader.option("joinSide", part)
    elif part:
        reader = reader.option("stateVarName", part)
    last = operator.last_batch if batch is None else batch
    if since is not None:
        reader = (
            reader.option("readChangeFeed", "true")
            .option("changeStartBatchId", since + 1)
            .option("changeEndBatchId", last)
        )
    else:
        reader = reader.option("batchId", last)
    # Spark 4.2 reads the state's partitions from the offset log's settings,
    # where a log by name (its source evolution) keeps none: "None.get". The
    # state's own count stands in, while the reader is built.
    previous = spark.conf.get(_PARTITIONS, None)
    spark.conf.set(_PARTITIONS, str(operator.partitions))
    try:
        frame = reader.load(checkpoint)
    finally:
        if previous is None:
            spark.conf.unset(_PARTITIONS)
        else:
            spark.conf.set(_PARTITIONS, previous)
    return flattened(frame)


def state_records(
    spark: SparkSession, checkpoint: str, operator: int = 0, **read: Any
) -> list[dict[str, Any]]:
    """``state_rows`` of operator id ``operator`` as dicts, sorted; ``read``:
    ``state_rows``'s options (``part``, ``batch``, ``since``, ``timers``)."""
    found = {o.id: o for o in state_operators(spark, checkpoint)}
    if operator not in found:
        raise ValueError(
            f"{checkpoint} keeps no state of an operator {operator}: "
            f"{sorted(found) or 'none'}"
        )
    chosen = found[operator]
    part = read.pop("part", None)
    if part is None and chosen.parts != (None,) and not read.get("timers"):
        raise ValueError(f"{chosen.name} {operator}: give part, one of {chosen.parts}")
    with readable(checkpoint) as location:
        frame = state_rows(spark, location, chosen, part=part, **read)
        rows = [row.asDict() for row in frame.collect()]
    return sorted(rows, key=lambda row: [str(v) for v in row.values()])


def flattened(frame: DataFrame) -> DataFrame:
    """``frame`` with its structs' fields as columns named by their path; a
    name a struct has twice (an aggregation's buffer: ``count`` per
    aggregate) gets ``#2``, ``#3``..."""
    columns = []
    for field_ in frame.schema.fields:
        name = field_.name
        if not isinstance(field_.dataType, StructType):
            columns.append(F.col(f"`{name}`"))
            continue
        names = _unique([f.name for f in field_.dataType.fields])
        renamed = StructType(
            [
                StructField(new, f.dataType, f.nullable)
                for new, f in zip(names, field_.dataType.fields, strict=True)
            ]
        )
        inner = F.col(f"`{name}`").cast(renamed)
        columns += [inner.getField(n).alias(f"{name}.{n}") for n in names]
    flat = frame.select(columns)
    if any(isinstance(f.dataType, StructType) for f in flat.schema.fields):
        return flattened(flat)
    return flat


def _unique(names: list[str]) -> list[str]:
    """Each name once, a repeated one numbered.

    Example:
        >>> _unique(["count", "sum", "count"])
        ['count', 'sum', 'count#2']
    """
    seen: dict[str, int] = {}
    unique = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        unique.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
    return unique


@contextlib.contextmanager
def readable(checkpoint: str) -> Iterator[str]:
    """``checkpoint`` as Spark's state reader can open it while the context
    lasts: Spark 4.2.0's escapes a local path's spaces and other letters
    once more than it reads them ("No committed batch found" in
    ``My%2520Streams``), so such a folder is read through a link whose path
    has none."""
    if "://" in checkpoint.removeprefix("file://"):  # another file system's
        yield checkpoint
        return
    # A relative path is the working folder's, whose path counts too.
    local = os.path.abspath(checkpoint.removeprefix("file://"))
    if _PLAIN.fullmatch(local):
        yield local
        return
    folder = tempfile.mkdtemp(prefix="kedro-streaming-state-")
    try:
        os.symlink(local, os.path.join(folder, "checkpoint"))
        yield os.path.join(folder, "checkpoint")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# What a path may hold for Spark's state reader to open it as it is.
_PLAIN = re.compile(r"[A-Za-z0-9_./+-]*")


def _coordinator(spark: SparkSession) -> None:
    # Spark's state reader asks the driver's state store coordinator, which
    # only a session that has run (or looked at) a streaming query started:
    # "Cannot find endpoint: ... StateStoreCoordinator".
    spark.streams.active  # noqa: B018 (starts the streams manager)
