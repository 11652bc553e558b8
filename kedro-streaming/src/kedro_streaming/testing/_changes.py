"""A sink kept from changes in the stream harness (``changes=``): its Delta
table in the test's folder, kept by the plugin's own code, read after each
step with what became of the step's changes."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, Row, SparkSession

from kedro_streaming._connectors.changes import (
    Changes,
    changes_problems,
    column_problems,
    take_outcomes,
)
from kedro_streaming._connectors.delta import changes_applier, checkpoint_query_id

_DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
NO_DELTA = (
    "changes= needs Delta in the test session: give the `spark_conf` fixture "
    "Delta's package, extension and catalog, as conf/delta/spark.yml does "
    '(docs/cdc.md, "Testing it")'
)


class ChangesTable:
    """The table one sink keeps from its changes, as ``save_args: changes:``
    says (``spec``), at ``folder``."""

    def __init__(self, spark: SparkSession, sink: str, spec: Any, folder: Path):
        problems = changes_problems(spec)
        if problems:
            raise ValueError(f"changes= of {sink}: " + "; ".join(problems))
        if _DELTA_EXTENSION not in spark.conf.get("spark.sql.extensions", ""):
            raise ValueError(NO_DELTA)
        self._spark, self._sink = spark, sink
        self._spec = Changes.parse(spec)
        self._path = str(folder)

    def applier(
        self, frame: DataFrame, checkpoint: Path
    ) -> Callable[[DataFrame, int], None]:
        """The ``foreachBatch`` function applying ``frame``'s micro-batches."""
        problems = column_problems(self._spec, frame.columns)
        if problems:
            raise ValueError(f"changes= of {self._sink}: " + "; ".join(problems))
        self._checkpoint = str(checkpoint)
        return changes_applier(
            frame, self._path, self._spec, self._sink, self._checkpoint
        )

    def after(self, batch_ids: list[int]) -> dict[str, Any]:
        """The table's rows now, sorted, and what the batches ``batch_ids``
        did: ``changes`` by outcome and ``versions`` (type 2), those with
        none left out."""
        changes: Counter = Counter()
        versions: Counter = Counter()
        if batch_ids:
            query = checkpoint_query_id(self._checkpoint)
            for batch_id in batch_ids:
                outcomes = take_outcomes(query, batch_id) or {}
                changes.update(outcomes.get("changes", {}))
                versions.update(outcomes.get("versions", {}))
        table = self._spark.read.format("delta").load(self._path)
        order = [*self._spec.keys, *[c for c in table.columns if c.startswith("__")]]
        rows: list[Row] = table.orderBy(*order).collect()
        return {
            "table": rows,
            "changes": {label: n for label, n in changes.items() if n},
            "versions": {change: n for change, n in versions.items() if n},
        }
