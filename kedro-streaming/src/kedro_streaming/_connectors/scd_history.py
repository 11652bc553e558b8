"""Type 2 of a table kept from changes: every change of a key kept beside
the table (``_scd_changes``), and the touched keys' versions computed again
from all of them each micro-batch, so that a late change takes its place in
history; the table then made exactly those versions in one MERGE."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from kedro_streaming._connectors.changes import (
    END_AT,
    LOG_FOLDER,
    START_AT,
    VERSION_CHANGES,
)
from kedro_streaming._connectors.scd_sql import DELETE_FLAG as _DELETE
from kedro_streaming._connectors.scd_sql import DELTA, Tables, q


def history(
    spark: SparkSession, t: Tables, view: str, batch: DataFrame
) -> dict[str, int]:
    seqs = t.spec.sequence
    # Every partition computed even when Delta skips a replayed MERGE: a
    # stateful query commits its state only then (as upsert_batches).
    batch.persist()
    log = t.table(LOG_FOLDER)
    spark.sql(
        f"SELECT * EXCEPT (__rank, __valid) FROM (SELECT *, row_number() OVER (PARTITION BY "
        f"{t.keys()}, {', '.join(q(s) for s in seqs)} ORDER BY {t.order()}) AS __rank "
        f"FROM ({t.ranked(view, all_rows=False)}) c) WHERE __rank = 1"
    ).createOrReplaceTempView(f"{view}_changes")
    changes = spark.table(f"{view}_changes").persist()
    try:
        total = batch.count()
        valid = spark.sql(
            f"SELECT count(*) FROM ({t.ranked(view, all_rows=False)})"
        ).first()[0]
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
        batch.unpersist()
    inserted = logged["num_inserted_rows"] if logged else 0
    return {
        "added to the history": inserted,
        "repeated": valid - inserted,
        **{f"versions {what}": written[what] for what in VERSION_CHANGES},
        "changes": valid,
        "total": total,
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
