"""A micro-batch that ``kedro streams capture`` took from a query's checkpoint
(``Incident``), replayed through today's nodes by the stream harness."""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from kedro.pipeline import Pipeline
from pyspark.sql import Row, SparkSession
from pyspark.sql.types import StructType

from kedro_streaming._checkpoint import Checkpoint
from kedro_streaming._observe.capture import (
    CHECKPOINT,
    INCIDENT,
    INPUTS,
    STATIC,
    WRITTEN,
)
from kedro_streaming.testing._steps import Step, sort_key

# The fixture's layout this code reads; a later one is refused.
FORMAT = 1
_TIME_ZONE = "spark.sql.session.timeZone"


class Incident:
    """One micro-batch of a query as ``kedro streams capture`` took it: each
    source's rows as the batch read them, the query's state and watermark
    before it, the static inputs and parameters, and what it wrote.

    Example:
        ```python
        # tests/incidents/test_hourly_borough_summary_batch_7.py, as written
        # by `kedro streams capture hourly_borough_summary --batch 7`
        INCIDENT = Incident(Path(__file__).parent / "hourly_borough_summary_batch_7")

        def test_batch_7_of_hourly_borough_summary(spark, tmp_path):
            replayed = INCIDENT.replay(spark, create_pipeline(), workdir=tmp_path)
            assert replayed.rows == INCIDENT.written(spark)
        ```
    """

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        record = json.loads((self.folder / INCIDENT).read_text(encoding="utf-8"))
        if record.get("format") != FORMAT:
            raise ValueError(
                f"{self.folder} was captured by another kedro-streaming "
                f"(format {record.get('format')}, this one reads {FORMAT}): "
                "capture the batch again"
            )
        self.record = record
        self.sink: str = record["sink"]
        self.batch: int = record["batch"]

    def written(self, spark: SparkSession) -> list[Row] | None:
        """What the batch wrote, sorted as ``Step.rows``: the sink's own rows
        where it says which they are, else the replay's at capture; ``None``
        for a batch that failed (write here what it should give)."""
        path = self.folder / WRITTEN
        if not path.exists():
            return None
        schema = StructType.fromJson(self.record["written"]["schema"])
        rows = spark.read.schema(schema).json(str(path))
        return sorted(rows.drop(*self._not_compared).collect(), key=sort_key)

    def replay(
        self, spark: SparkSession, pipeline: Pipeline, *, workdir: str | Path
    ) -> Step:
        """Runs the batch again through ``pipeline``'s nodes that write the
        sink, from the state before it; its ``Step`` (``rows``: the batch's).

        The batch runs with the watermark it ran with; its processing time
        (``current_timestamp()``, processing-time timers) is today's."""
        # Imported here: the harness imports this module's package.
        from kedro_streaming.testing import StreamTest  # noqa: PLC0415

        if self.sink not in pipeline.all_outputs():
            raise ValueError(
                f"The pipeline given writes no '{self.sink}': give the one "
                f"captured ({self.record['pipeline']!r})"
            )
        work = Path(workdir)
        checkpoint = work / "checkpoints" / self.sink
        shutil.copytree(self.folder / CHECKPOINT, checkpoint)
        static: dict[str, Any] = {
            name: spark.read.parquet(str(self.folder / STATIC / name))
            for name in self.record["static"]
        }
        static.update(self.record["values"])
        test = StreamTest(
            spark,
            pipeline.to_outputs(self.sink),
            streams={
                name: StructType.fromJson(source["schema"])
                for name, source in self.record["sources"].items()
            },
            static=static,
            output_mode={self.sink: self.record["output_mode"]},
            sinks=[self.sink],
            workdir=work,
        )
        files = {
            name: sorted((self.folder / INPUTS / name).glob("*.parquet"))
            for name in self.record["sources"]
        }
        try:
            with _time_zone(spark, self.record["time_zone"]):
                steps = test._step_files(files)  # noqa: SLF001 (the harness's own)
                step = steps[self.sink]
        finally:
            test.close()
        self._check_ran_as_captured(step, Checkpoint(str(checkpoint)))
        rows = [_without(row, self._not_compared) for row in step.batches[0]]
        return replace(step, rows=sorted(rows, key=sort_key), batches=step.batches[:1])

    @property
    def _not_compared(self) -> list[str]:
        """Columns the replay gives other values than the batch did (a path
        of the file it reads, a clock), found at capture: left out of both."""
        return self.record["written"].get("not_compared", [])

    def _check_ran_as_captured(self, step: Step, checkpoint: Checkpoint) -> None:
        ran = [report["batchId"] for report in step.progress]
        if not ran or ran[0] != self.batch:
            raise AssertionError(
                f"The replay ran batches {ran}, not batch {self.batch} first"
            )
        watermark = checkpoint.offsets(self.batch).metadata.get("batchWatermarkMs")
        if watermark != self.record["watermark_ms"]:
            raise AssertionError(
                f"The replay's watermark was {watermark} ms, the batch's "
                f"{self.record['watermark_ms']} ms"
            )


def differing_columns(
    written: list[Row], replayed: list[Row], columns: list[str]
) -> list[str] | None:
    """The columns whose values differ between two sets of rows of the same
    columns, if the rows are the same without them; ``None`` if not even so.

    Example:
        >>> from pyspark.sql import Row
        >>> differing_columns([Row(1, "a")], [Row(1, "b")], ["n", "path"])
        ['path']
        >>> differing_columns([Row(1, "a")], [Row(2, "b")], ["n", "path"]) is None
        True
    """
    if len(written) != len(replayed):
        return None
    apart = [
        name
        for index, name in enumerate(columns)
        if sorted((r[index] for r in written), key=sort_key)
        != sorted((r[index] for r in replayed), key=sort_key)
    ]
    if len(apart) == len(columns) and columns:
        return None

    def kept(rows: list[Row]) -> list[tuple]:
        return sorted(
            (
                tuple(v for v, c in zip(r, columns, strict=True) if c not in apart)
                for r in rows
            ),
            key=sort_key,
        )

    return apart if kept(written) == kept(replayed) else None


def _without(row: Row, columns: list[str]) -> Row:
    if not columns:
        return row
    fields = {k: v for k, v in row.asDict(recursive=False).items() if k not in columns}
    return Row(**fields)


@contextlib.contextmanager
def _time_zone(spark: SparkSession, zone: str | None) -> Iterator[None]:
    """The session in the run's time zone while the replay runs."""
    before = spark.conf.get(_TIME_ZONE)
    if zone:
        spark.conf.set(_TIME_ZONE, zone)
    try:
        yield
    finally:
        spark.conf.set(_TIME_ZONE, before)
