"""The SQL of a table kept from changes: its keys, sequence and kept
columns quoted and compared, and Delta's idempotent writes."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from pyspark.sql import SparkSession

from kedro_streaming._connectors.changes import Changes

DELTA = "delta"
# Delta's switches for idempotent DML: a commit whose (app id, version) pair
# the table has already recorded is skipped.
_TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
_TXN_VERSION = "spark.databricks.delta.write.txnVersion"
DELETE_FLAG = "__delete"


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

    def ranked(self, view: str, all_rows: bool = True) -> str:
        """The batch's changes, a delete flagged, ``__valid`` when it has a
        key and a sequence (only those unless ``all_rows``)."""
        cols = ", ".join(q(c) for c in self.kept)
        return (
            f"SELECT {cols}, coalesce(({self.delete}), false) AS {DELETE_FLAG}, "
            f"{self.valid()} AS __valid FROM {view}"
            + ("" if all_rows else f" WHERE {self.valid()}")
        )

    def order(self) -> str:
        """Newest first (changes aliased ``c``); at one sequence a delete,
        then the greatest row."""
        kept = ", ".join(f"c.{q(c)}" for c in self.kept)
        return (
            f"{self.seq('c')} DESC, c.{DELETE_FLAG} DESC, to_json(struct({kept})) DESC"
        )
