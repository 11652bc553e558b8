"""Each micro-batch of changes applied to a Delta table, exactly: per key the
change with the highest sequence wins, whatever the order or batching.

Type 1 keeps the current rows; the deletes it applied are remembered (beside
the table, for ``deletes_kept_for``) so that a late older change cannot bring
a row back. Type 2 keeps every change of a key in a log beside the table and
computes the key's versions again from all of them, so that a late change
takes its place in history. Each statement is one Delta commit carrying the
query's id and the batch id: a batch replayed after a crash changes nothing.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from kedro_streaming._connectors.changes import (
    DELETES_FOLDER,
    END_AT,
    LOG_FOLDER,
    START_AT,
    Changes,
)

logger = logging.getLogger("kedro_streaming.delta")

DELTA = "delta"
# Delta's switches for idempotent DML: a commit whose (app id, version) pair
# the table has already recorded is skipped.
_TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
_TXN_VERSION = "spark.databricks.delta.write.txnVersion"
_DELETE, _CATEGORY, _DELETED_AT = "__delete", "__category", "__deleted_at"
FORGET_EVERY = 50
# What became of each change of a micro-batch, in the order the log line says.
OUTCOMES = (
    "inserted",
    "updated",
    "deleted",
    "older than the table's row",
    "repeated",
    "older than a remembered delete",
    "deleting a row not in the table",
    "superseded in its micro-batch",
)


@contextlib.contextmanager
def idempotent(spark: SparkSession, app_id: str, version: int) -> Iterator[None]:
    """Delta writes within carry (``app_id``, ``version``): one a table has
    already recorded is skipped, as a micro-batch replayed after a crash."""
    spark.conf.set(_TXN_APP_ID, app_id)
    spark.conf.set(_TXN_VERSION, str(version))
    try:
        yield
    finally:
        spark.conf.unset(_TXN_APP_ID)
        spark.conf.unset(_TXN_VERSION)


def q(name: str) -> str:
    """A column's name quoted for Spark SQL."""
    return "`" + name.replace("`", "``") + "`"


class Tables:
    """The table's SQL for one spec: keys, sequence and kept columns."""

    def __init__(self, spec: Changes, path: str, columns: list[str]) -> None:
        self.spec, self.path = spec, path.rstrip("/")
        self.kept = spec.kept(columns)
        self.delete = spec.delete_condition(columns)
        self.tracked = spec.tracked(columns) if spec.scd_type == 2 else []

    def table(self, folder: str = "") -> str:
        return f"delta.`{self.path}{'/' + folder if folder else ''}`"

    def seq(self, alias: str) -> str:
        """The sequence as one comparable value (a struct when several)."""
        cols = [f"{alias}.{q(c)}" for c in self.spec.sequence]
        if len(cols) == 1:
            return cols[0]
        return (
            "named_struct("
            + ", ".join(
                f"'{c}', {col}" for c, col in zip(self.spec.sequence, cols, strict=True)
            )
            + ")"
        )

    def on_keys(self, left: str, right: str) -> str:
        return " AND ".join(f"{left}.{q(k)} = {right}.{q(k)}" for k in self.spec.keys)

    def keys(self, alias: str = "") -> str:
        return ", ".join(f"{alias}{q(k)}" for k in self.spec.keys)

    def valid(self) -> str:
        return " AND ".join(
            f"{q(c)} IS NOT NULL" for c in (*self.spec.keys, *self.spec.sequence)
        )

    def ranked(self, view: str) -> str:
        """The batch's changes with a key and a sequence, a delete flagged."""
        cols = ", ".join(q(c) for c in self.kept)
        return (
            f"SELECT {cols}, coalesce(({self.delete}), false) AS {_DELETE} "
            f"FROM {view} WHERE {self.valid()}"
        )

    def order(self) -> str:
        """Newest first (changes aliased ``c``); at one sequence a delete,
        then the greatest row."""
        kept = ", ".join(f"c.{q(c)}" for c in self.kept)
        return f"{self.seq('c')} DESC, c.{_DELETE} DESC, to_json(struct({kept})) DESC"


def keep_changes(
    path: str, spec: Changes, name: str, query_id: Callable[[], str]
) -> Callable[[DataFrame, int], None]:
    """A ``foreachBatch`` function applying each micro-batch of changes to the
    Delta table at ``path``, as ``spec`` says (types 1 and 2)."""

    def apply(batch: DataFrame, batch_id: int) -> None:
        spark = batch.sparkSession
        tables = Tables(spec, path, batch.columns)
        view = f"changes_{query_id().replace('-', '_')}"
        # Every partition computed even when Delta skips a replayed MERGE: a
        # stateful query commits its state only then (as upsert_batches).
        batch.persist()
        total = batch.count()
        batch.createOrReplaceTempView(view)
        try:
            with idempotent(spark, query_id(), batch_id):
                if spec.scd_type == 1:
                    figures = _type1(spark, tables, view)
                else:
                    figures = _type2(spark, tables, view)
        finally:
            spark.catalog.dropTempView(view)
            batch.unpersist()
        if spec.scd_type == 1 and batch_id % FORGET_EVERY == 0:
            forget_deletes(spark, path, spec)  # outside the pair: its own commit
        refused = total - figures.pop("changes")
        logger.info(
            "%s: micro-batch %d: %d changes: %s",
            name,
            batch_id,
            total,
            ", ".join(f"{n} {what}" for what, n in figures.items() if n),
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


def _type1(spark: SparkSession, t: Tables, view: str) -> dict[str, int]:
    kept = t.kept
    deletes = t.table(DELETES_FOLDER)
    row_seq, new_seq = t.seq("r"), t.seq("c")
    on_row = t.on_keys("c", "r")
    spark.sql(
        f"SELECT *, row_number() OVER (PARTITION BY {t.keys()} ORDER BY "
        f"{t.order()}) AS __rank FROM ({t.ranked(view)}) c"
    ).createOrReplaceTempView(f"{view}_ranked")
    classified = spark.sql(
        f"""
        SELECT c.*, CASE
            WHEN c.__rank > 1 THEN 'superseded in its micro-batch'
            WHEN d.__present AND {new_seq} < d.__seq THEN 'older than a remembered delete'
            WHEN r.__present IS NULL AND c.{_DELETE} THEN 'deleting a row not in the table'
            WHEN r.__present IS NULL THEN 'inserted'
            WHEN {new_seq} < {row_seq} THEN 'older than the table''s row'
            WHEN {new_seq} = {row_seq} THEN 'repeated'
            WHEN c.{_DELETE} THEN 'deleted'
            ELSE 'updated' END AS {_CATEGORY}
        FROM {view}_ranked c
        LEFT JOIN (SELECT {t.keys()}, max({t.seq("x")}) AS __seq, true AS __present
                   FROM {deletes} x GROUP BY {t.keys()}) d ON {t.on_keys("c", "d")}
        LEFT JOIN (SELECT {t.keys()}, {", ".join(q(s) for s in t.spec.sequence)},
                   true AS __present FROM {t.table()}) r ON {on_row}
        """
    ).persist()
    try:
        figures = _counts(classified)
        classified.createOrReplaceTempView(f"{view}_classified")
        if figures["updated"] or figures["deleted"]:
            cols = ", ".join(q(c) for c in kept)
            sets = ", ".join(f"t.{q(c)} = s.{q(c)}" for c in kept)
            spark.sql(
                f"MERGE INTO {t.table()} AS t USING (SELECT * FROM "
                f"{view}_classified WHERE {_CATEGORY} IN ('inserted', 'updated', "
                f"'deleted')) AS s ON {t.on_keys('t', 's')} "
                f"WHEN MATCHED AND s.{_CATEGORY} = 'deleted' THEN DELETE "
                f"WHEN MATCHED THEN UPDATE SET {sets} "
                f"WHEN NOT MATCHED THEN INSERT ({cols}) VALUES "
                f"({', '.join(f's.{q(c)}' for c in kept)})"
            )
        elif figures["inserted"]:  # new keys only: appended, no join
            classified.where(f"{_CATEGORY} = 'inserted'").select(*kept).write.format(
                DELTA
            ).mode("append").save(t.path)
        if figures["deleted"] or figures["deleting a row not in the table"]:
            _remember_deletes(spark, t, f"{view}_classified")
    finally:
        classified.unpersist()
    return figures


def _remember_deletes(spark: SparkSession, t: Tables, classified: str) -> None:
    """Each applied delete's key and sequence, with when (appended: a key's
    newest is the one read)."""
    own = ", ".join(q(c) for c in (*t.spec.keys, *t.spec.sequence))
    now = datetime.now(timezone.utc).replace(tzinfo=None).isoformat()
    spark.sql(
        f"SELECT {own}, TIMESTAMP'{now}' AS {_DELETED_AT} FROM {classified} "
        f"WHERE {_CATEGORY} IN ('deleted', 'deleting a row not in the table')"
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


def _type2(spark: SparkSession, t: Tables, view: str) -> dict[str, int]:
    seqs = t.spec.sequence
    log = t.table(LOG_FOLDER)
    spark.sql(
        f"SELECT * EXCEPT (__rank) FROM (SELECT *, row_number() OVER (PARTITION BY "
        f"{t.keys()}, {', '.join(q(s) for s in seqs)} ORDER BY {t.order()}) AS __rank "
        f"FROM ({t.ranked(view)}) c) WHERE __rank = 1"
    ).createOrReplaceTempView(f"{view}_changes")
    changes = spark.table(f"{view}_changes").persist()
    try:
        valid = spark.sql(f"SELECT count(*) FROM ({t.ranked(view)})").first()[0]
        on_change = t.on_keys("l", "c") + "".join(
            f" AND l.{q(s)} = c.{q(s)}" for s in seqs
        )
        logged = spark.sql(
            f"MERGE INTO {log} AS l USING {view}_changes AS c ON {on_change} "
            "WHEN NOT MATCHED THEN INSERT *"
        ).first()
        spark.sql(
            f"SELECT DISTINCT {t.keys()} FROM {view}_changes"
        ).createOrReplaceTempView(f"{view}_keys")
        versions = _versions(spark, t, f"{view}_keys")
        versions.createOrReplaceTempView(f"{view}_versions")
        written = _write_versions(spark, t, view)
    finally:
        changes.unpersist()
    inserted = logged["num_inserted_rows"] if logged else 0
    return {
        "changes": valid,
        "versions opened": written["opened"],
        "versions closed": written["closed"],
        "versions rewritten": written["rewritten"],
        "versions removed": written["removed"],
        "repeated": valid - inserted,
    }


def _versions(spark: SparkSession, t: Tables, touched: str) -> DataFrame:
    """Every version of the touched keys, from all their changes in the log."""
    keys, seqs, kept = t.keys(), t.spec.sequence, t.kept
    tracked = ", ".join(q(c) for c in t.tracked)
    by_key = f"PARTITION BY {keys} ORDER BY {', '.join(q(s) for s in seqs)}"
    seq = t.seq("h")
    values = ", ".join(q(c) for c in kept)
    return spark.sql(
        f"""
        WITH history AS (
            SELECT l.* FROM {t.table(LOG_FOLDER)} l LEFT SEMI JOIN {touched} k
            ON {t.on_keys("l", "k")}
        ), marked AS (
            SELECT h.*, {seq} AS __seq,
                NOT h.{_DELETE} AND coalesce(
                    lag(h.{_DELETE}) OVER w
                    OR NOT (struct({tracked}) <=> lag(struct({tracked})) OVER w),
                    true) AS __start
            FROM history h WINDOW w AS ({by_key})
        ), numbered AS (
            SELECT *, sum(CAST(__start AS INT)) OVER (
                {by_key} ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
            ) AS __version FROM marked
        ), grouped AS (
            SELECT {keys}, __version,
                max_by(struct({values}), IF({_DELETE}, NULL, __seq)) AS __row,
                min(IF(__start, __seq, NULL)) AS {START_AT},
                min(IF({_DELETE}, __seq, NULL)) AS __first_delete
            FROM numbered WHERE __version > 0 GROUP BY {keys}, __version
        )
        SELECT __row.*, {START_AT}, coalesce(__first_delete, lead({START_AT})
            OVER (PARTITION BY {keys} ORDER BY __version)) AS {END_AT}
        FROM grouped
        """
    )


def _write_versions(spark: SparkSession, t: Tables, view: str) -> dict[str, int]:
    """The touched keys' versions in the table made exactly those computed."""
    cols = [*t.kept, START_AT, END_AT]
    on = t.on_keys("v", "e") + f" AND v.{START_AT} = e.{START_AT}"
    keys_of = ", ".join(f"coalesce(v.{q(k)}, e.{q(k)}) AS {q(k)}" for k in t.spec.keys)
    others = ", ".join(
        f"v.{q(c)}" for c in cols if c not in t.spec.keys and c != START_AT
    )
    source = spark.sql(
        f"""
        SELECT {keys_of}, coalesce(v.{START_AT}, e.{START_AT}) AS {START_AT}, {others},
            v.{START_AT} IS NULL AS __remove,
            e.__present AND e.__was_end IS NULL AND v.{END_AT} IS NOT NULL AS __closes,
            e.__present IS NULL AS __new
        FROM {view}_versions v FULL OUTER JOIN (
            SELECT {t.keys("t.")}, t.{START_AT}, t.{END_AT} AS __was_end,
                true AS __present
            FROM {t.table()} t LEFT SEMI JOIN {view}_keys k ON {t.on_keys("t", "k")}
        ) e ON {on}
        """
    ).persist()
    try:
        closed, new, rows = source.selectExpr(
            "count_if(__closes)", "count_if(__new)", "count(*)"
        ).first()
        if new == rows:  # no touched key had a version: appended, no join
            source.select(*cols).write.format(DELTA).mode("append").save(t.path)
            return {"opened": new, "closed": 0, "rewritten": 0, "removed": 0}
        source.createOrReplaceTempView(f"{view}_source")
        differs = " OR ".join(f"NOT (t.{q(c)} <=> s.{q(c)})" for c in cols)
        merged = spark.sql(
            f"MERGE INTO {t.table()} AS t USING {view}_source AS s "
            f"ON {t.on_keys('t', 's')} AND t.{START_AT} = s.{START_AT} "
            "WHEN MATCHED AND s.__remove THEN DELETE "
            f"WHEN MATCHED AND ({differs}) THEN UPDATE SET "
            + ", ".join(f"t.{q(c)} = s.{q(c)}" for c in cols)
            + f" WHEN NOT MATCHED AND NOT s.__remove THEN INSERT ({', '.join(map(q, cols))}) "
            f"VALUES ({', '.join(f's.{q(c)}' for c in cols)})"
        ).first()
    finally:
        source.unpersist()
    if merged is None:  # a replayed batch: Delta skipped the MERGE
        return {"opened": 0, "closed": 0, "rewritten": 0, "removed": 0}
    return {
        "opened": merged["num_inserted_rows"],
        "closed": closed,
        "rewritten": merged["num_updated_rows"] - closed,
        "removed": merged["num_deleted_rows"],
    }


def _counts(classified: DataFrame) -> dict[str, int]:
    counted = dict(classified.groupBy(_CATEGORY).count().collect())
    figures = {what: counted.get(what, 0) for what in OUTCOMES}
    figures["changes"] = sum(counted.values())
    return figures


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
    spark.createDataFrame([], T.StructType(fields)).write.format(DELTA).mode(
        "ignore"
    ).save(path)
    _add_columns(spark, path, T.StructType(fields))


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
) -> None:
    """The table ``spec`` keeps and the one beside it, unless there are;
    columns the changes gained since are added (rows before have them null).

    Made as the query starts, on the run's session: ``createDataFrame``
    makes its session the active one, which a micro-batch's is not."""
    schema = table_schema(spec, data.schema)
    spark.createDataFrame([], schema).write.format(DELTA).mode("ignore").save(path)
    _add_columns(spark, path, schema)
    _create_beside(spark, Tables(spec, path, data.columns), data.schema)


def _add_columns(spark: SparkSession, path: str, schema: T.StructType) -> None:
    have = set(spark.read.format(DELTA).load(path).columns)
    new = [f for f in schema.fields if f.name not in have]
    if new:
        added = ", ".join(f"{q(f.name)} {f.dataType.simpleString()}" for f in new)
        spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS ({added})")
