"""A small static table as expressions: rows found by key, without a join.

A stream joined with a static table reads and broadcasts it again in every
micro-batch (in Real-Time Mode, at every checkpoint). ``Lookup`` reads it
once, when the query is built (a change takes effect at the next start), and
puts its rows in the plan as a literal. For tables past ``MAX_ROWS``, join.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from pyspark.sql import Column, DataFrame, Row
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    DataType,
    DateType,
    IntegralType,
    NumericType,
    StringType,
)

from kedro_streaming.errors import StreamingConfigError

MAX_ROWS = 10_000


# While a run runs: the rows each table gave, with the hash of its plan. A run
# builds some nodes twice, and a table read again is a Spark job that waits for
# the run's first queries to free the cores (1.2 s for the example's zones).
class _RunReads:
    tables: list[tuple[int, DataFrame, list[Row]]] | None = None


_run_reads = _RunReads()


class Lookup:
    """The rows of ``table`` by their ``key`` column, as Spark expressions.

    Args:
        table: A batch DataFrame of at most ``MAX_ROWS`` rows; read once.
        key: The column that names a row; rows without one are left out,
            and two different rows under one key are refused.

    Example:
        >>> from pyspark.sql import functions as F
        >>> from kedro_streaming import Lookup
        >>> zones = spark.createDataFrame(
        ...     [(1, "EWR"), (4, "Manhattan")], "LocationID INT, Borough STRING"
        ... )
        >>> lookup = Lookup(zones, key="LocationID")
        >>> trips = spark.createDataFrame([(4,), (7,)], "PULocationID INT")
        >>> trips.select(
        ...     lookup.has(F.col("PULocationID")).alias("known"),
        ...     lookup.value("Borough", F.col("PULocationID")).alias("borough"),
        ... ).collect()
        [Row(known=True, borough='Manhattan'), Row(known=False, borough=None)]
    """

    def __init__(self, table: DataFrame, key: str) -> None:
        rows = _read(table)
        if len(rows) > MAX_ROWS:
            raise StreamingConfigError(
                f"Lookup by '{key}': the table has more than {MAX_ROWS:,} rows; "
                "join it instead (broadcast, if it fits in memory)."
            )
        self.key = key
        self._types = {f.name: f.dataType for f in table.schema.fields}
        self._rows: dict = {}
        for row in rows:
            found = row[key]
            if found is None:
                continue
            if self._rows.setdefault(found, row) != row:
                raise StreamingConfigError(
                    f"Lookup by '{key}': two different rows have {key} {found!r}: "
                    f"{self._rows[found].asDict()} and {row.asDict()}; a lookup "
                    "finds one row per key."
                )

    def __len__(self) -> int:
        return len(self._rows)

    def has(self, key: Column) -> Column:
        """Whether the table has a row for ``key`` (null for a null key)."""
        known = self._find({found: True for found in self._rows}, BooleanType(), key)
        return F.when(key.isNotNull(), F.coalesce(known, F.lit(False)))

    def value(self, column: str, key: Column) -> Column:
        """``column`` of the row for ``key``; null when there is none."""
        if column not in self._types:
            raise StreamingConfigError(
                f"Lookup by '{self.key}' has no column '{column}'; "
                f"its columns: {', '.join(self._types)}."
            )
        values = {found: row[column] for found, row in self._rows.items()}
        return self._find(values, self._types[column], key)

    def _find(self, values: dict, kind: DataType, key: Column) -> Column:
        """The value of ``values`` for ``key``, null when it has none.

        One literal of JSON text, which Spark folds into a constant once per
        planning (``map(k1, v1, ...)`` took 0.25 s more for 265 zones). Close
        integer keys index an array: a map is searched key by key.
        """
        lowest, slots = self._slots()
        if slots:
            texts = [_text(values.get(lowest + i), kind) for i in range(slots)]
            array_type = f"array<{_sql_type(kind)}>"
            found = F.from_json(F.lit(json.dumps(texts)), "array<string>")
            offset = (key - F.lit(lowest)).cast("int")
            highest = lowest + slots - 1
            return F.when(key.between(lowest, highest), found.cast(array_type)[offset])
        key_kind = self._types[self.key]
        as_text = json.dumps(
            {
                _text(found, key_kind): _text(value, kind)
                for found, value in values.items()
            }
        )
        map_type = f"map<{_sql_type(key_kind)},{_sql_type(kind)}>"
        return F.from_json(F.lit(as_text), "map<string,string>").cast(map_type)[key]

    def _slots(self) -> tuple[int, int]:
        """The lowest key and the array's length to the highest, for integer
        keys that leave few slots empty; else (0, 0)."""
        if not isinstance(self._types[self.key], IntegralType) or not self._rows:
            return 0, 0
        lowest, highest = min(self._rows), max(self._rows)
        slots = highest - lowest + 1
        return (lowest, slots) if slots <= 4 * len(self._rows) + 64 else (0, 0)


def run_reads_each_table_once() -> Callable[[], None]:
    """Until the returned function is called, a ``Lookup`` of a table an
    earlier one read (``DataFrame.sameSemantics``) takes the same rows."""
    _run_reads.tables = []

    def put_back() -> None:
        _run_reads.tables = None

    return put_back


def _read(table: DataFrame) -> list[Row]:
    reads = _run_reads.tables
    if reads is None:
        return table.limit(MAX_ROWS + 1).collect()
    plan = table.semanticHash()
    for hashed, read, rows in reads:
        if hashed == plan and table.sameSemantics(read):
            return rows
    rows = table.limit(MAX_ROWS + 1).collect()
    reads.append((plan, table, rows))
    return rows


def _sql_type(kind: DataType) -> str:
    if not isinstance(kind, _LITERAL_TYPES):
        raise StreamingConfigError(
            f"Lookup holds strings, numbers, booleans and dates, not "
            f"{kind.simpleString()}; join the table for such a column."
        )
    return kind.simpleString()


def _text(value: object, kind: DataType) -> str | None:
    """``value`` as the text Spark casts back to it (a date as ISO 8601)."""
    if value is None:
        return None
    return value.isoformat() if isinstance(kind, DateType) else str(value)


_LITERAL_TYPES = (StringType, NumericType, BooleanType, DateType)
