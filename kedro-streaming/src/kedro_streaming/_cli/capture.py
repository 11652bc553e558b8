"""``kedro streams capture``: one batch of a sink's query, taken from its
checkpoint into a folder of the project's tests, with a test that replays it
through the nodes (``kedro_streaming.testing.Incident``)."""

from __future__ import annotations

import json
import shutil
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import click
from kedro.framework.cli.utils import env_option
from kedro.framework.project import pipelines as registered_pipelines
from kedro.pipeline import Pipeline
from pyspark.sql import DataFrame

from kedro_streaming._checkpoint import Checkpoint
from kedro_streaming._cli.incident_module import write_test
from kedro_streaming._cli.project import _open, streaming_sink
from kedro_streaming._dataset import SparkStreamingDataset
from kedro_streaming._observe.capture import (
    CHECKPOINT,
    INCIDENT,
    INPUTS,
    STATIC,
    WRITTEN,
    CaptureError,
    offsets_lines,
    read_input,
    source_offsets,
    source_order,
    state_before,
)
from kedro_streaming._session.session import spark_session
from kedro_streaming._spark import headline, jvm_of
from kedro_streaming.testing import Incident
from kedro_streaming.testing._incident import FORMAT, differing_columns
from kedro_streaming.testing._steps import sort_key


@click.command()
@click.argument("sink")
@env_option
@click.option(
    "--batch", type=int, help="The batch (default: the newest that read input)."
)
@click.option(
    "--to",
    "folder",
    type=click.Path(file_okay=False, path_type=Path),
    help="Its folder (tests/incidents/<sink>_batch_<N>).",
)
@click.pass_obj
def capture(metadata, *, sink: str, env: str | None, batch: int | None, folder):
    """Takes one batch of SINK's query into a test that replays it.

    Its input as the batch read it (Spark reads the same Kafka offsets or
    files again), the state before it, and what it wrote go to a folder of
    tests/incidents, beside a test that runs them through today's nodes.
    """
    name = _pipeline_of(sink)
    if name is None:  # not a sink: the closest name said
        streaming_sink(_open(metadata, env, []), sink)
        raise click.ClickException(f"No registered pipeline writes '{sink}'.")
    run = _open(metadata, env, [name])
    streaming_sink(run, sink)
    default = metadata.project_path / "tests" / "incidents"
    try:
        folder, lines = capture_batch(
            run.catalog,
            registered_pipelines[name],
            sink,
            batch=batch,
            folder=folder,
            under=default,
            pipeline_name=name,
            progress=run.state.records(),
        )
    except CaptureError as error:
        raise click.ClickException(str(error)) from None
    except Exception as error:  # Spark's, reading the checkpoint or a source
        raise click.ClickException(
            f"Capturing '{sink}' failed: {headline(error)}"
        ) from error
    batch = Incident(folder).batch
    test = write_test(metadata, folder, sink, batch, name)
    click.echo(f"Captured batch {batch} of '{sink}' into {folder}:")
    for line in lines:
        click.echo(f"  {line}")
    click.echo(f"Its test: {test.relative_to(metadata.project_path)}")


def capture_batch(  # noqa: PLR0913 (the batch, and where it goes)
    catalog: Any,
    pipeline: Pipeline,
    sink: str,
    *,
    batch: int | None,
    folder: Path | None,
    under: Path,
    pipeline_name: str,
    progress: list[dict[str, Any]] | None = None,
) -> tuple[Path, list[str]]:
    """Captures batch ``batch`` of ``sink``'s query, built from ``pipeline``'s
    nodes, into ``folder`` (``under/<sink>_batch_<N>``); the folder and what
    to say of it. By default the newest batch that read or wrote rows, by
    the run's ``progress`` log (else by its sources' offsets)."""
    dataset = catalog[sink]
    checkpoint = Checkpoint(dataset.checkpoint)
    newest = batch is None
    did = {
        record["batch"]: bool(record.get("input_rows") or record.get("rows_written"))
        for record in progress or []
        if record.get("query") == sink
    }
    batch = _batch(checkpoint, sink, batch, did)
    skipped = checkpoint.batches("offsets")[-1] - batch if newest else 0
    folder = folder or under / f"{sink}_batch_{batch}"
    if folder.exists():
        raise CaptureError(
            f"{folder} is there already: give --to another folder, or delete it"
        )
    with tempfile.TemporaryDirectory(prefix="kedro-streaming-incident-") as staging:
        stage = Path(staging) / "incident"
        try:
            lines = _take(
                catalog,
                pipeline.to_outputs(sink),
                sink=sink,
                checkpoint=checkpoint,
                batch=batch,
                stage=stage,
                name=pipeline_name,
            )
        except CaptureError as error:
            raise CaptureError(
                f"Batch {batch} of '{sink}' cannot be captured: {error}."
            ) from None
        folder.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(stage, folder)
    if skipped:
        lines.insert(
            0,
            f"the newest batch that read or wrote rows: after it, {skipped} "
            f"batch{'es' if skipped > 1 else ''} did neither (only the "
            "watermark moved), and would replay nothing; --batch takes another",
        )
    return folder, lines


def _pipeline_of(sink: str) -> str | None:
    """The smallest registered pipeline that writes ``sink``."""
    writing = sorted(
        (len(pipeline.nodes), name)
        for name, pipeline in registered_pipelines.items()
        if name != "__default__" and sink in pipeline.all_outputs()
    )
    return writing[0][1] if writing else None


def _batch(
    checkpoint: Checkpoint, sink: str, batch: int | None, did: dict[int, bool]
) -> int:
    offsets = checkpoint.batches("offsets")
    if not offsets:
        raise CaptureError(f"'{sink}' has run no batch: nothing to capture.")
    if batch is None:
        batch = newest_with_rows(checkpoint, offsets, did)
    if batch not in offsets:
        raise CaptureError(
            f"'{sink}' has no batch {batch} in its checkpoint: its offsets "
            f"keep batches {offsets[0]} to {offsets[-1]}."
        )
    if batch > 0 and batch - 1 not in checkpoint.batches("commits"):
        raise CaptureError(
            f"Batch {batch - 1} of '{sink}', before {batch}, is not committed "
            f"(or no longer kept): its state before batch {batch} is unknown."
        )
    return batch


def newest_with_rows(
    checkpoint: Checkpoint, offsets: list[int], did: dict[int, bool]
) -> int:
    """The newest of ``offsets``' batches that read or wrote rows: as the
    progress log says (``did``); a batch it does not have, when its sources'
    offsets moved on from the batch before (a batch that reads nothing keeps
    them where they were). Else the newest."""
    try:
        for batch in reversed(offsets):
            if did.get(batch) or batch - 1 not in offsets:
                return batch
            if (
                batch not in did
                and offsets_lines(checkpoint, batch)[1]
                != (offsets_lines(checkpoint, batch - 1)[1])
            ):
                return batch
    except CaptureError:  # sources it cannot read: said when captured
        pass
    return offsets[-1]


def _take(  # noqa: PLR0913 (what a capture reads and writes)
    catalog: Any,
    pipeline: Pipeline,
    *,
    sink: str,
    checkpoint: Checkpoint,
    batch: int,
    stage: Path,
    name: str,
) -> list[str]:
    """Writes the incident's folder at ``stage``; its lines to show."""
    spark = spark_session()
    if jvm_of(spark) is None:
        raise CaptureError(
            "over Spark Connect the server runs the capture's code, out of "
            "its reach: capture with an environment whose Spark runs here "
            "(the same checkpoint, e.g. without --env connect)"
        )
    dataset = catalog[sink]
    data = {each: catalog.load(each) for each in sorted(pipeline.inputs())}
    streams = sorted(
        each
        for each in data
        if isinstance(catalog[each] if each in catalog else None, SparkStreamingDataset)
    )
    for each in pipeline.nodes:  # builds the query's DataFrame: nothing runs
        data.update(each.run({i: data[i] for i in each.inputs}))
    frame = data.get(sink)
    if not isinstance(frame, DataFrame):
        raise CaptureError("its node gives no streaming DataFrame")
    order = source_order(frame, {each: data[each] for each in streams}) or []
    logged = len(offsets_lines(checkpoint, batch)[1])
    if logged != len(order):
        raise CaptureError(
            f"its checkpoint logs {logged} sources, and the query built today "
            f"reads {len(order)}: capture with the code that ran the batch"
        )
    lines, sources = [], {}
    for position, source in enumerate(order):
        rows = read_input(
            checkpoint, batch, position, data[source], stage / INPUTS / source
        )
        start, end = source_offsets(checkpoint, batch, position)
        sources[source] = {
            "schema": data[source].schema.jsonValue(),
            "rows": rows,
            "offsets": {"start": start, "end": end},
        }
        read = catalog[source].connector.offset_range(start, end)
        lines.append(
            f"{source}: {rows} rows, as batch {batch} read them"
            + (f" ({read})" if read else "")
        )
    static, values = _static(data, set(pipeline.inputs()) - set(streams), stage, lines)
    files = state_before(checkpoint, batch, len(order), stage / CHECKPOINT)
    lines.append(f"its state before batch {batch}: {files} files")
    offsets = checkpoint.offsets(batch)
    record = {
        "format": FORMAT,
        "sink": sink,
        "batch": batch,
        "pipeline": name,
        "captured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "output_mode": dataset.output_mode,
        "time_zone": spark.conf.get("spark.sql.session.timeZone"),
        "watermark_ms": offsets.metadata.get("batchWatermarkMs"),
        "batch_timestamp_ms": offsets.metadata.get("batchTimestampMs"),
        "sources": sources,
        "static": static,
        "values": values,
        "written": {"schema": frame.schema.jsonValue()},
    }
    (stage / INCIDENT).write_text(json.dumps(record, indent=1), encoding="utf-8")
    not_compared: list[str] = []
    lines += _written(
        spark,
        dataset,
        checkpoint=checkpoint,
        batch=batch,
        frame=frame,
        stage=stage,
        pipeline=pipeline,
        not_compared=not_compared,
    )
    record["written"].update(said=lines[-1], not_compared=not_compared)
    (stage / INCIDENT).write_text(json.dumps(record, indent=1), encoding="utf-8")
    return lines


def _static(
    data: dict[str, Any], names: set[str], stage: Path, lines: list[str]
) -> tuple[list[str], dict[str, Any]]:
    """Writes each static input of the query: DataFrames as parquet, the
    others (parameters) as JSON values; their names and the values."""
    tables, values = [], {}
    for name in sorted(names):
        value = data[name]
        pandas = type(value).__module__.startswith("pandas")
        if isinstance(value, DataFrame) or pandas:
            frame = spark_session().createDataFrame(value) if pandas else value
            frame.write.parquet(str(stage / STATIC / name))
            tables.append(name)
            lines.append(f"{name}: {frame.count()} rows, as the catalog loads it today")
            continue
        try:
            json.dumps(value)
        except TypeError:
            raise CaptureError(
                f"its input '{name}' is a {type(value).__name__}, which a "
                "fixture cannot keep (a DataFrame, pandas or JSON value can)"
            ) from None
        values[name] = value
        lines.append(f"{name}: as the configuration gives it today")
    return tables, values


def _written(  # noqa: PLR0913 (what the batch wrote, and where it is read from)
    spark: Any,
    dataset: SparkStreamingDataset,
    *,
    checkpoint: Checkpoint,
    batch: int,
    frame: DataFrame,
    stage: Path,
    pipeline: Pipeline,
    not_compared: list[str],
) -> list[str]:
    """Writes what the batch wrote (``written.json``), replays the batch once
    and says how the two compare; the columns the replay cannot give as the
    batch did go to ``not_compared``."""
    committed = batch in checkpoint.batches("commits")
    query_id = checkpoint.query_id() or ""
    sink = dataset.connector.batch_output(spark, dataset, query_id, batch)
    with tempfile.TemporaryDirectory(prefix="kedro-streaming-replay-") as work:
        try:
            replayed = Incident(stage).replay(spark, pipeline, workdir=work).rows
        except Exception as error:  # noqa: BLE001 (said, with the batch's fate)
            if committed:
                raise CaptureError(f"its replay failed: {headline(error)}") from None
            return [
                f"the batch did not commit, and its replay fails: {headline(error)}"
            ]
    columns = frame.columns
    if sink is None:
        _write_json(spark.createDataFrame(replayed, frame.schema), stage / WRITTEN)
        why = "the sink does not say which rows a batch wrote"
        return [f"written: {len(replayed)} rows, as the replay writes them ({why})"]
    rows = sorted(sink.select(*columns).collect(), key=sort_key)
    _write_json(sink.select(*columns), stage / WRITTEN)
    said = f"written: {len(rows)} rows, as the sink holds them; the replay writes"
    apart = differing_columns(rows, replayed, columns)
    if apart is None:
        return [f"{said} {len(replayed)} rows that differ (the nodes changed since)"]
    if apart:
        not_compared.extend(apart)
        return [
            f"{said} the same {len(rows)} rows but for {', '.join(apart)}, which "
            "it gives other values (a path of the file it reads, a clock): "
            "not compared"
        ]
    return [f"{said} the same {len(replayed)} rows"]


def _write_json(frame: DataFrame, path: Path) -> None:
    """``frame`` as one file of JSON lines at ``path``."""
    folder = path.with_suffix(".parts")
    frame.coalesce(1).write.json(str(folder))
    (part,) = folder.glob("part-*")
    part.rename(path)
    shutil.rmtree(folder)
