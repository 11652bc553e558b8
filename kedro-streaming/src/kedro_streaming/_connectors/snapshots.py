"""Successive full snapshots of a table kept as changes (``changes:`` with
``from_snapshots: true``). Each snapshot newer than the last one applied is
compared with the table's current rows: a row new or different is a change
at the snapshot's sequence, a current key the snapshot lacks is a delete at
it. Those changes are applied as a change feed's are. The snapshots applied
are recorded beside the table, one row each; an older one is not applied.

Applying a snapshot again changes nothing (its comparison finds no change),
so a micro-batch replayed after a crash needs no idempotent pair.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from kedro_streaming._connectors.changes import END_AT, OPERATION, SNAPSHOTS_FOLDER
from kedro_streaming._connectors.scd_sql import Tables, q

APPLIED_AT = "applied_at"
UNCHANGED = "unchanged in its snapshot"
OLDER = "in a snapshot not newer than the last applied"


def apply_snapshots(
    spark: SparkSession,
    t: Tables,
    view: str,
    apply: Callable[[str, DataFrame], dict[str, int]],
) -> Counter:
    """Each snapshot of the micro-batch in ``view``, in sequence order,
    turned into changes and handed to ``apply`` (a view's name and its
    DataFrame; it returns its figures). The figures of all, summed."""
    sequence = t.spec.sequence[0]
    rows = spark.table(view).where(t.valid())
    counted = rows.groupBy(sequence).count().orderBy(sequence).collect()
    last = spark.sql(
        f"SELECT max({q(sequence)}) FROM {t.table(SNAPSHOTS_FOLDER)}"
    ).first()[0]
    figures: Counter = Counter()
    for value, size in counted:
        if last is not None and value <= last:
            figures[OLDER] += size
            continue
        snapshot = rows.where(F.col(sequence) == F.lit(value))
        changes = _changes(spark, t, snapshot, value).persist()
        try:
            upserts = changes.where(f"{q(OPERATION)} <> 'd'").count()
            changes.createOrReplaceTempView(f"{view}_snapshot")
            done = apply(f"{view}_snapshot", changes)
        finally:
            changes.unpersist()
        done.pop("total", None)
        done.pop("changes", None)
        figures.update(done)
        figures[UNCHANGED] += size - upserts
        snapshot.createOrReplaceTempView(f"{view}_applied")
        spark.sql(
            f"INSERT INTO {t.table(SNAPSHOTS_FOLDER)} SELECT max({q(sequence)}), "
            f"current_timestamp() FROM {view}_applied"
        )
        last = value
    return figures


def _changes(
    spark: SparkSession, t: Tables, snapshot: DataFrame, value: object
) -> DataFrame:
    """What the snapshot changes in the current rows: its rows new or
    different (``_op`` 'u'), and the current rows it lacks (``_op`` 'd', at
    its sequence)."""
    keys, sequence = list(t.spec.keys), t.spec.sequence[0]
    values = [c for c in t.kept if c not in keys and c != sequence]
    current = spark.read.format("delta").load(t.path)
    if t.spec.scd_type == 2:
        current = current.where(F.col(END_AT).isNull())
    current = current.select(*t.kept)
    mine = snapshot.select(*t.kept)
    theirs = current.select(
        *keys, F.struct(*values).alias("__was"), F.lit(True).alias("__present")
    )
    upserts = (
        mine.join(theirs, keys, "left")
        .where(
            F.col("__present").isNull()
            | ~F.struct(*[F.col(c) for c in values]).eqNullSafe(F.col("__was"))
        )
        .select(*t.kept)
    )
    kind = snapshot.schema[sequence].dataType
    deletes = current.join(mine.select(*keys), keys, "left_anti").withColumn(
        sequence, F.lit(value).cast(kind)
    )
    return upserts.withColumn(OPERATION, F.lit("u")).unionByName(
        deletes.select(*t.kept).withColumn(OPERATION, F.lit("d"))
    )
