"""One micro-batch of a query, taken from its checkpoint for a test to replay:
each source's rows as the batch read them, and the state before it.

Spark reads the inputs again itself. Each source runs alone on a copy of
the checkpoint that holds the batch's offsets but not its commit, so Spark
reruns exactly those offsets (a Kafka range, a folder's files, Delta's
versions), and the catalog's reader decodes them as the run did. The state
before the batch is the checkpoint's own files up to it, for the harness's
sources: the replay's query resumes there, with the batch's watermark.
"""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame

from kedro_streaming._checkpoint import Checkpoint
from kedro_streaming._spark import java_frame, plan_nodes

# A captured batch's folder: its record, each source's rows, the static
# inputs, the checkpoint the replay resumes, and what the batch wrote.
INCIDENT = "incident.json"
INPUTS = "inputs"
STATIC = "static"
CHECKPOINT = "checkpoint"
WRITTEN = "written.json"
# The harness's sources are parquet folders: their offset before any file.
FRESH_FILE_SOURCE = '{"logOffset":-1}'
# A state store's files of one version: HDFS-backed (``7.delta``,
# ``7.snapshot``) or RocksDB (``7.changelog``, ``7.zip``, ``7_<id>.zip``).
_VERSIONED = re.compile(r"(\d+)(?:_[^./]*)?\.(?:delta|snapshot|changelog|zip)")
_STREAMING_LEAVES = ("StreamingRelation", "StreamingRelationV2")


class CaptureError(Exception):
    """A batch that cannot be captured (the message says why and what to do)."""


def source_order(frame: DataFrame, sources: dict[str, DataFrame]) -> list[str] | None:
    """The names of ``sources`` in the order Spark gives the query of
    ``frame`` its sources (that of its offsets' lines); ``None`` over Spark
    Connect, whose plans live on the server."""
    jframe = java_frame(frame)
    if jframe is None:
        return None
    leaves = {name: _leaves(java_frame(source)) for name, source in sources.items()}
    order: list[str] = []
    for leaf in _leaves(jframe):
        name = next((n for n, own in leaves.items() if leaf in own), None)
        if name is None:
            raise CaptureError(
                "the query reads a stream that is no catalog entry (a node "
                "made it): its batch cannot be read again"
            )
        if name not in order:  # one source read twice is one source to Spark
            order.append(name)
    return order


def _leaves(jframe: Any) -> list[frozenset[int]]:
    """Each streaming leaf of a plan, by its columns' ids, parents first."""
    plan = jframe.queryExecution().analyzed()
    found = []
    for node in plan_nodes(plan):
        if node.nodeName() in _STREAMING_LEAVES:
            output = node.output()
            found.append(
                frozenset(output.apply(i).exprId().id() for i in range(output.size()))
            )
    return found


def offsets_lines(checkpoint: Checkpoint, batch: int) -> tuple[list[str], list[str]]:
    """Batch ``batch``'s offsets file: its head (version, Spark's metadata)
    and one line per source."""
    lines = checkpoint.text(f"offsets/{batch}").splitlines()
    if checkpoint.offsets(batch).named:
        raise CaptureError(
            "its checkpoint names its sources (Spark 4.2's source evolution), "
            "which capture does not read yet"
        )
    return lines[:2], lines[2:]


def source_offsets(
    checkpoint: Checkpoint, batch: int, position: int
) -> tuple[Any, Any]:
    """Source number ``position``'s offsets before batch ``batch`` and after
    it, as Spark logged them (before batch 0: its initial ones, if kept)."""
    end = _json(offsets_lines(checkpoint, batch)[1][position])
    if batch > 0:
        return _json(offsets_lines(checkpoint, batch - 1)[1][position]), end
    initial = checkpoint.files(f"sources/{position}")
    if "0" not in initial:
        return None, end
    return _json(checkpoint.text(f"sources/{position}/0").splitlines()[-1]), end


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def read_input(  # noqa: PLR0913 (the source, its place and the batch)
    checkpoint: Checkpoint,
    batch: int,
    position: int,
    frame: DataFrame,
    into: Path,
) -> int:
    """Writes what source number ``position`` of the query gave batch
    ``batch`` to ``into`` (parquet), read again by ``frame`` (the catalog's
    reader of it); how many rows."""
    with tempfile.TemporaryDirectory(prefix="kedro-streaming-capture-") as folder:
        work = Path(folder)
        (work / "metadata").write_text(checkpoint.text("metadata"))
        for each in (batch - 1, batch):
            if each >= 0:
                head, sources = offsets_lines(checkpoint, each)
                _write(work / "offsets" / str(each), [*head, sources[position]])
        if batch > 0:  # the one before committed, the batch not: Spark reruns it
            _write(
                work / "commits" / str(batch - 1),
                [checkpoint.text(f"commits/{batch - 1}")],
            )
        checkpoint.copy(f"sources/{position}", work / "sources" / "0", lambda _: True)
        ran: list[int] = []
        rows: list[int] = []

        def keep(data: DataFrame, batch_id: int) -> None:
            ran.append(batch_id)
            data.write.mode("overwrite").parquet(str(into))
            rows.append(data.sparkSession.read.parquet(str(into)).count())

        query = (
            frame.writeStream.foreachBatch(keep)
            .option("checkpointLocation", str(work))
            .trigger(once=True)  # the batch the offsets hold, and no other
            .start()
        )
        query.awaitTermination()
    if ran != [batch]:
        raise CaptureError(f"Spark ran batches {ran} of the source, not {batch}")
    return rows[0]


def state_before(checkpoint: Checkpoint, batch: int, sources: int, to: Path) -> int:
    """Writes to ``to`` a checkpoint from which the harness's query (its
    ``sources`` parquet folders, none read yet) runs batch ``batch`` with
    the state and watermark the query had before it; how many state files."""
    to.mkdir(parents=True, exist_ok=True)
    (to / "metadata").write_text(checkpoint.text("metadata"))
    if batch == 0:
        return 0
    head, lines = offsets_lines(checkpoint, batch - 1)
    if len(lines) != sources:
        raise CaptureError(
            f"its checkpoint has {len(lines)} sources, the query today {sources}"
        )
    # Spark reads the two newest batches' offsets as it resumes.
    for each in range(max(batch - 2, 0), batch):
        head = offsets_lines(checkpoint, each)[0]
        _write(to / "offsets" / str(each), [*head, *[FRESH_FILE_SOURCE] * sources])
    # Its commit carries the next batch's watermark: the batch's own.
    _write(to / "commits" / str(batch - 1), [checkpoint.text(f"commits/{batch - 1}")])
    return checkpoint.copy("state", to / "state", lambda name: _kept(name, batch))


def _kept(name: str, batch: int) -> bool:
    """Whether a state file (its path under ``state/``) is of the state
    before ``batch``: version ``batch`` or older (batch N commits version
    N + 1). RocksDB's shared files and Spark's metadata are kept whole."""
    parts = name.split("/")
    if any(part in ("SSTs", "_metadata", "_stateSchema") for part in parts):
        return True
    versioned = _VERSIONED.fullmatch(parts[-1])
    return versioned is None or int(versioned[1]) <= batch


def _write(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(line.rstrip("\n") for line in lines))
