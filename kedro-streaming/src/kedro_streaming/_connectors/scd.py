"""Each micro-batch of changes applied to a Delta table, exactly: per key the
change with the highest sequence wins, whatever the order or batching.

Type 1 (here) keeps the current rows; its deletes are remembered (beside the
table, for ``deletes_kept_for``) so that a late older change cannot bring a
row back. Type 2 (``scd_history``) keeps every change of a key beside the
table and computes the key's versions again. Whole snapshots become changes
(``snapshots``). The table's commits carry the query's id and the batch id:
a batch replayed after a crash changes nothing.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from kedro_streaming._connectors.changes import (
    CHANGE_OUTCOMES,
    DELETES_FOLDER,
    END_AT,
    LOG_FOLDER,
    SNAPSHOTS_FOLDER,
    START_AT,
    VERSION_CHANGES,
    Changes,
    describe_outcomes,
    record_outcomes,
)
from kedro_streaming._connectors.scd_history import history
from kedro_streaming._connectors.scd_sql import (
    DELETE_FLAG,
    DELTA,
    Tables,
    idempotent,
    q,
)
from kedro_streaming._connectors.snapshots import APPLIED_AT, apply_snapshots
from kedro_streaming._connectors.streams import as_nullable

logger = logging.getLogger("kedro_streaming.delta")

_DELETE, _DELETED_AT = DELETE_FLAG, "__deleted_at"
FORGET_EVERY = 50


def keep_changes(
    path: str,
    spec: Changes,
    name: str,
    query_id: Callable[[], str],
    new_table: bool = False,
) -> Callable[[DataFrame, int], None]:
    """A ``foreachBatch`` function applying each micro-batch of changes to the
    Delta table at ``path``, as ``spec`` says (types 1 and 2). A ``new_table``
    (just created, empty) takes its first inserts appended, not MERGEd."""

    first_load = [new_table]  # until the first commit

    def apply(batch: DataFrame, batch_id: int) -> None:
        spark = batch.sparkSession
        tables = Tables(spec, path, batch.columns)
        view = f"changes_{query_id().replace('-', '_')}"
        batch.createOrReplaceTempView(view)
        try:
            pair = functools.partial(idempotent, spark, query_id(), batch_id)
            if spec.from_snapshots:
                figures = _snapshots(spark, tables, view, batch, first_load)
            elif spec.scd_type == 1:
                figures = _type1(spark, tables, view, first_load, pair)
            else:
                with pair():
                    figures = history(spark, tables, view, batch)
        finally:
            spark.catalog.dropTempView(view)
        if spec.scd_type == 1 and batch_id and batch_id % FORGET_EVERY == 0:
            forget_deletes(spark, path, spec)  # outside the pair: its own commit
        total = figures.pop("total")
        refused = total - figures.pop("changes")
        versions = {
            what: figures.pop(f"versions {what}")
            for what in VERSION_CHANGES
            if f"versions {what}" in figures
        }
        figures["without a key or a sequence"] = refused
        changes = {  # in one order, whatever order they were counted in
            label: figures[said]
            for said, label in CHANGE_OUTCOMES.items()
            if said in figures
        }
        record_outcomes(
            query_id(), batch_id, {"changes": changes, "versions": versions}
        )
        logger.info(
            "%s: micro-batch %d: %d %s%s",
            name,
            batch_id,
            total,
            "snapshot rows" if spec.from_snapshots else "changes",
            (": " + describe_outcomes(changes, versions)) if total else "",
        )
        if refused:
            logger.warning(
                "%s: micro-batch %d: %d changes without a key or a sequence were "
                "not applied (debezium_changes quarantines them before the sink)",
                name,
                batch_id,
                refused,
            )

    return apply


def _snapshots(
    spark: SparkSession,
    t: Tables,
    view: str,
    batch: DataFrame,
    first_load: list[bool],
) -> dict[str, int]:
    """A micro-batch of whole snapshots, each applied as the changes it makes
    (no idempotent pair: a snapshot applied again changes nothing)."""

    def apply(changes_view: str, changes: DataFrame) -> dict[str, int]:
        tables = Tables(t.spec, t.path, changes.columns)
        if t.spec.scd_type == 1:
            return _type1(
                spark, tables, changes_view, first_load, contextlib.nullcontext
            )
        return history(spark, tables, changes_view, changes)

    batch.persist()
    try:
        total = batch.count()
        figures = apply_snapshots(spark, t, view, apply)
        valid = spark.sql(f"SELECT count(*) FROM {view} WHERE {t.valid()}").first()[0]
    finally:
        batch.unpersist()
    # The snapshots' deletes are not rows of theirs: counted, not summed in.
    return {**figures, "changes": valid, "total": total}


def _type1(
    spark: SparkSession,
    t: Tables,
    view: str,
    first_load: list[bool],
    pair: Callable[[], contextlib.AbstractContextManager],
) -> dict[str, int]:
    """The newest change of each key not older than its remembered delete,
    MERGEd when newer than the table's row; the deletes remembered. Delta's
    MERGE says what it inserted, updated and deleted: no other pass reads
    the table. One pass over the micro-batch computes every partition, even
    when Delta skips a replayed batch's MERGE (a stateful query commits its
    state only then, as ``upsert_batches``).

    The table's commit carries the batch's idempotent ``pair``; the deletes'
    append does not: appended again, a delete is the same fact (the newest
    is read), and the pair would cost a job reading the side table's state
    (1 s a micro-batch here), which a MERGE reads anyway."""
    latest = spark.sql(
        f"""
        SELECT c.*, coalesce({t.seq("c")} < d.__seq, false) AS __stale FROM (
            SELECT *, row_number() OVER (PARTITION BY {t.keys()}, __valid
            ORDER BY {t.order()}) AS __rank FROM ({t.ranked(view)}) c) c
        LEFT JOIN (SELECT {t.keys()}, max({t.seq("x")}) AS __seq
                   FROM {t.table(DELETES_FOLDER)} x GROUP BY {t.keys()}) d
        ON {t.on_keys("c", "d")}
        """
    ).persist()
    try:
        total, superseded, stale, deletes, others = latest.selectExpr(
            "count(*)",
            "count_if(__valid AND __rank > 1)",
            "count_if(__valid AND __rank = 1 AND __stale)",
            f"count_if(__valid AND __rank = 1 AND NOT __stale AND {_DELETE})",
            f"count_if(__valid AND __rank = 1 AND NOT __stale AND NOT {_DELETE})",
        ).first()
        latest.where("__valid AND __rank = 1 AND NOT __stale").createOrReplaceTempView(
            f"{view}_latest"
        )
        done = {"inserted": 0, "updated": 0, "deleted": 0}
        if deletes or others:
            with pair():
                done = _merge(spark, t, f"{view}_latest", first_load[0], others)
            first_load[0] = False
        if deletes:
            _remember_deletes(spark, t, f"{view}_latest")
    finally:
        latest.unpersist()
    return {
        **done,
        "not newer than the table's row": others - done["inserted"] - done["updated"],
        "deletes changing nothing": deletes - done["deleted"],
        "older than a remembered delete": stale,
        "superseded in its micro-batch": superseded,
        "changes": superseded + stale + deletes + others,
        "total": total,
    }


def _merge(
    spark: SparkSession, t: Tables, latest: str, first_load: bool, inserts: int
) -> dict[str, int]:
    """The newest changes MERGEd (the ``inserts`` appended when the table has
    no file yet): what Delta says it inserted, updated and deleted."""
    kept, cols = t.kept, ", ".join(q(c) for c in t.kept)
    if first_load and inserts:  # nothing to match: appended
        spark.table(latest).where(f"NOT {_DELETE}").select(*kept).write.format(
            DELTA
        ).mode("append").save(t.path)
        return {"inserted": inserts, "updated": 0, "deleted": 0}
    newer = f"{t.seq('s')} > {t.seq('t')}"
    merged = spark.sql(
        f"MERGE INTO {t.table()} AS t USING {latest} AS s "
        f"ON {t.on_keys('t', 's')} "
        f"WHEN MATCHED AND {newer} AND s.{_DELETE} THEN DELETE "
        f"WHEN MATCHED AND {newer} THEN UPDATE SET "
        + ", ".join(f"t.{q(c)} = s.{q(c)}" for c in kept)
        + f" WHEN NOT MATCHED AND NOT s.{_DELETE} THEN INSERT ({cols}) "
        f"VALUES ({', '.join(f's.{q(c)}' for c in kept)})"
    ).first()
    if merged is None:  # a replayed batch whose commit Delta already has
        return {"inserted": 0, "updated": 0, "deleted": 0}
    return {
        "inserted": merged["num_inserted_rows"],
        "updated": merged["num_updated_rows"],
        "deleted": merged["num_deleted_rows"],
    }


def _remember_deletes(spark: SparkSession, t: Tables, latest: str) -> None:
    """Each key's newest delete, with when (appended: a key's newest is the
    one read). One older than the table's row is kept too: a change older
    than it is older than the row, so it blocks nothing that is not."""
    own = ", ".join(q(c) for c in (*t.spec.keys, *t.spec.sequence))
    now = datetime.now(timezone.utc).replace(tzinfo=None).isoformat()
    spark.sql(
        f"SELECT {own}, TIMESTAMP'{now}' AS {_DELETED_AT} FROM {latest} WHERE {_DELETE}"
    ).write.format(DELTA).mode("append").save(f"{t.path}/{DELETES_FOLDER}")


def forget_deletes(spark: SparkSession, path: str, spec: Changes) -> None:
    """Deletes remembered longer than ``deletes_kept_for``, forgotten (once
    in ``FORGET_EVERY`` micro-batches: each is a commit)."""
    forget = datetime.now(timezone.utc).replace(tzinfo=None) - timedelta(
        seconds=spec.deletes_kept_seconds
    )
    spark.sql(
        f"DELETE FROM delta.`{path.rstrip('/')}/{DELETES_FOLDER}` "
        f"WHERE {_DELETED_AT} < TIMESTAMP'{forget.isoformat()}'"
    )


def _create_beside(spark: SparkSession, t: Tables, schema: T.StructType) -> None:
    """The table beside the target a type keeps (type 1's remembered deletes,
    type 2's changes), unless there is one."""
    if t.spec.scd_type == 1:
        own = [*t.spec.keys, *t.spec.sequence]
        fields = [schema[c] for c in own] + [
            T.StructField(_DELETED_AT, T.TimestampType())
        ]
        path = f"{t.path}/{DELETES_FOLDER}"
    else:
        fields = [schema[c] for c in t.kept] + [T.StructField(_DELETE, T.BooleanType())]
        path = f"{t.path}/{LOG_FOLDER}"
    _create(spark, path, T.StructType(fields))
    if t.spec.from_snapshots:
        applied = [
            schema[t.spec.sequence[0]],
            T.StructField(APPLIED_AT, T.TimestampType()),
        ]
        _create(spark, f"{t.path}/{SNAPSHOTS_FOLDER}", T.StructType(applied))


def table_schema(spec: Changes, written: T.StructType) -> T.StructType:
    """The schema of the table ``spec`` keeps from changes of ``written``'s."""
    fields = [written[c] for c in Tables(spec, "", written.fieldNames()).kept]
    if spec.scd_type == 2:
        seqs = [written[c] for c in spec.sequence]
        kind = seqs[0].dataType if len(seqs) == 1 else T.StructType(seqs)
        fields += [T.StructField(START_AT, kind), T.StructField(END_AT, kind)]
    return T.StructType(fields)


def create_target(
    spark: SparkSession, path: str, spec: Changes, data: DataFrame
) -> bool:
    """The table ``spec`` keeps and the one beside it, unless there are;
    columns the changes gained since are added (rows before have them null).
    Whether the table is new.

    Made as the query starts, on the run's session, outside any micro-batch's
    idempotent pair."""
    try:
        spark.read.format(DELTA).load(path)
        new = False
    except AnalysisException:  # not a Delta table (yet)
        new = True
    _create(spark, path, table_schema(spec, data.schema))
    _create_beside(spark, Tables(spec, path, data.columns), data.schema)
    return new


def _create(spark: SparkSession, path: str, schema: T.StructType) -> None:
    """A Delta table of ``schema`` at ``path`` unless there is one (a commit
    of its log, no job: 0.4 s against 1 s for an empty DataFrame written),
    nullable as a DataFrame's write makes it; then any columns it lacks."""
    ddl = as_nullable(schema).toDDL()
    spark.sql(f"CREATE TABLE IF NOT EXISTS delta.`{path}` ({ddl}) USING {DELTA}")
    _add_columns(spark, path, schema)


def _add_columns(spark: SparkSession, path: str, schema: T.StructType) -> None:
    have = set(spark.read.format(DELTA).load(path).columns)
    new = [f for f in schema.fields if f.name not in have]
    if new:
        added = ", ".join(f"{q(f.name)} {f.dataType.simpleString()}" for f in new)
        spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS ({added})")
