"""Test a streaming node or pipeline micro-batch by micro-batch, in pytest.

Each streaming input is a parquet file source over a folder of its own; each
sink is a query with its own checkpoint, run per ``step`` with the
``availableNow`` trigger, so state, watermark and offsets pass from step to
step as from one run to the next. Not covered: Kafka's offsets and headers,
Real-Time Mode, the project's sinks and their options, and timings.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from kedro.pipeline import Node, Pipeline
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from kedro_streaming._connectors.streams import names_sources, source_name
from kedro_streaming._observe.state_contents import state_records
from kedro_streaming.testing._changes import ChangesTable
from kedro_streaming.testing._incident import Incident
from kedro_streaming.testing._inputs import as_frame, as_pipeline, check_names
from kedro_streaming.testing._queries import SinkQuery
from kedro_streaming.testing._steps import Step

__all__ = ["Incident", "Step", "StreamTest"]


class StreamTest:
    """Runs a node function, a node or a pipeline on micro-batches you choose.

    ``step`` returns a ``Step`` for a node function, and ``{sink: Step}`` for
    a node or pipeline (sinks: outputs no node of it reads, or ``sinks``).

    Example:
        >>> import tempfile
        >>> from kedro_streaming.testing import StreamTest
        >>> def count_per_key(events):
        ...     return events.groupBy("key").count()
        >>> counts = StreamTest(
        ...     spark, count_per_key, streams={"events": "key STRING"},
        ...     output_mode="complete", workdir=tempfile.mkdtemp(),
        ... )
        >>> counts.step(events=[("a",), ("b",), ("a",)]).rows
        [Row(key='a', count=2), Row(key='b', count=1)]
        >>> counts.step(events=[("b",)]).rows
        [Row(key='a', count=2), Row(key='b', count=2)]
    """

    def __init__(  # noqa: PLR0913
        self,
        spark: SparkSession,
        target: Callable[..., Any] | Node | Pipeline,
        *,
        streams: Mapping[str, str | StructType],
        static: Mapping[str, Any] | None = None,
        output_mode: str | Mapping[str, str] = "append",
        sinks: Iterable[str] | None = None,
        changes: Mapping[str, Any] | None = None,
        workdir: str | Path,
    ) -> None:
        """Builds the queries; nothing runs until the first ``step``.

        Args:
            target: A node function (its parameters are the input names), a
                Kedro ``node`` or a ``Pipeline`` (its dataset names are).
            streams: Each streaming input's schema, as DDL or a ``StructType``.
            static: The other inputs: DataFrames, pandas DataFrames or lists
                of dicts (made DataFrames), or other values, passed as is.
            output_mode: For several sinks, ``{sink: mode}`` (default append).
            changes: A sink kept from changes: its ``save_args: changes:``
                (for several sinks, ``{sink: changes}``). Each ``Step`` then
                has the table after it (``table``) and what became of its
                changes (``changes``, ``versions``). Needs Delta in the session.
            workdir: An empty folder for the inputs' files and checkpoints.
        """
        self._spark = spark
        self._single = not isinstance(target, Node | Pipeline)
        self._static = dict(static or {})
        self._pipeline = as_pipeline(target, {*streams, *self._static})
        self._schemas = {
            name: schema
            if isinstance(schema, StructType)
            else StructType.fromDDL(schema)
            for name, schema in streams.items()
        }
        sinks = sorted(sinks or self._pipeline.outputs())
        if not isinstance(output_mode, Mapping):
            output_mode = dict.fromkeys(sinks, output_mode)
        modes = {sink: output_mode.get(sink, "append") for sink in sinks}
        check_names(self._pipeline, self._schemas, self._static, modes)
        self._workdir = Path(workdir)
        self._steps = 0
        if changes is not None and "keys" in changes:
            changes = dict.fromkeys(sinks, changes)
        tables = {
            sink: ChangesTable(spark, sink, spec, self._workdir / "tables" / sink)
            for sink, spec in (changes or {}).items()
        }
        self._queries = {
            sink: SinkQuery(
                self._workdir / "checkpoints" / sink,
                modes[sink],
                reads={
                    str(self._folder(name))
                    for name in self._pipeline.to_outputs(sink).inputs()
                    if name in self._schemas
                },
                table=tables.get(sink),
            )
            for sink in sinks
        }
        self._build()

    def step(self, **batches: Any) -> Step | dict[str, Step]:
        """Feeds one micro-batch and runs every sink's query until it is done.

        ``batches``: per streaming input, its rows (dicts, tuples or ``Row``s
        in the schema's order, or a pandas DataFrame); left out means none.
        """
        unknown = sorted(set(batches) - set(self._schemas))
        if unknown:
            raise ValueError(
                f"{unknown} are not streaming inputs; those are {sorted(self._schemas)}"
            )
        landed = {str(self._folder(name)): len(rows) for name, rows in batches.items()}
        began = int(time.time() * 1000) / 1000  # as Spark's reports: in ms
        for name, rows in batches.items():
            self._land(name, rows)
        return self._run_step(landed, began)

    def _step_files(self, files: Mapping[str, list[Path]]) -> dict[str, Step]:
        """``step`` fed parquet files of the inputs' schemas (copied), not rows."""
        began = int(time.time() * 1000) / 1000
        landed = {}
        for name, paths in files.items():
            for number, path in enumerate(paths):
                target = self._folder(name) / f"{self._steps:06d}-{number:04d}.parquet"
                shutil.copyfile(path, target)
            rows = self._spark.read.parquet(*map(str, paths)).count() if paths else 0
            landed[str(self._folder(name))] = rows
        return self._run_step(landed, began)

    def _run_step(self, landed: dict[str, int], began: float) -> Any:
        self._steps += 1
        for query in self._queries.values():  # all at once, as in a run
            query.start()
        steps = {
            sink: query.finish(landed, began) for sink, query in self._queries.items()
        }
        return next(iter(steps.values())) if self._single else steps

    def run(self, batches: Iterable[Mapping[str, Any]]) -> list[Any]:
        """``step`` for each item of ``batches`` (``{input: rows}``), in order."""
        return [self.step(**batch) for batch in batches]

    def restart(self, *, replay_last_batch: bool = False, **static: Any) -> None:
        """Builds the queries again from the node functions, as a new run does.

        ``replay_last_batch`` takes each sink's last batch out of its commit
        log (as after a crash before the commit), so the next step reruns it;
        ``static`` replaces static inputs (e.g. changed parameters).
        """
        self.close()
        self._static.update(static)
        self._build()
        for query in self._queries.values() if replay_last_batch else ():
            query.uncommit_last_batch()

    def state(self, sink: str | None = None, **read: Any) -> list[dict[str, Any]]:
        """What ``sink``'s query (the only one by default) keeps in its state
        after the last step, read from its checkpoint as ``kedro streams
        state`` reads it: one dict per key (``key.<field>``, ``value.<field>``,
        ``partition_id``), sorted. ``read``: ``operator`` (0), ``part`` (a
        join's side, a processor's variable), ``batch`` (the last step's last
        by default, even if a query with processing-time timers ran more
        since), ``since`` (the changes after that batch), ``timers``."""
        query = self._queries[sink or next(iter(self._queries))]
        if read.get("batch") is None and query.step_batch is not None:
            read["batch"] = query.step_batch
        return state_records(self._spark, str(query.checkpoint), **read)

    def close(self) -> None:
        """Stops the queries; the ``stream_test`` fixture calls it after the test."""
        for query in self._queries.values():
            query.stop()

    def _reader(self, name: str) -> Any:
        """A stream reader, naming its source when the session names them."""
        reader = self._spark.readStream
        return reader.name(source_name(name)) if names_sources(self._spark) else reader

    def _build(self) -> None:
        """Gives each sink's query its DataFrame, from the node functions."""
        data: dict[str, Any] = {
            name: self._reader(name).schema(schema).parquet(str(self._folder(name)))
            for name, schema in self._schemas.items()
        }
        data.update(
            (name, as_frame(self._spark, value)) for name, value in self._static.items()
        )
        for each in self._pipeline.nodes:  # in dependency order
            data.update(each.run({name: data[name] for name in each.inputs}))
        static = sorted(
            sink
            for sink in self._queries
            if not isinstance(data[sink], DataFrame) or not data[sink].isStreaming
        )
        if static:
            raise ValueError(f"{static} are not streaming DataFrames: no query to run")
        for sink, query in self._queries.items():
            query.use(data[sink])

    def _folder(self, name: str) -> Path:
        folder = self._workdir / "streams" / name.replace(":", "_")
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def _land(self, name: str, rows: Any) -> None:
        """Writes ``rows`` as one parquet file, moved in whole: never half-read."""
        if len(rows) == 0:
            return
        staging = self._workdir / "staging" / f"{name}-{self._steps}"
        frame = self._spark.createDataFrame(rows, self._schemas[name])
        frame.coalesce(1).write.parquet(str(staging))
        (part,) = staging.glob("part-*.parquet")
        part.rename(self._folder(name) / f"{self._steps:06d}.parquet")
        shutil.rmtree(staging)
