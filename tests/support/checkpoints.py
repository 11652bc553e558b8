"""Reading what a run wrote without Spark: tables (Delta with delta-rs,
parquet by its sink log), checkpoints' offset and source logs, and each
query's micro-batches replayed from them.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from urllib.parse import unquote, urlparse

import pandas as pd
from deltalake import DeltaTable
from reference import (
    EPOCH,
    current_boroughs,
    decode,
    example_settings,
    expected_outputs,
    text_lines,
    zone_boroughs,
)


def read_table(tables: Path, relative: str) -> pd.DataFrame:
    """Reads a table without Spark, only what its log commits: a Delta table
    with delta-rs (the `deltalake` package), a Spark parquet sink file by file.

    After a crash the folder can hold files of a batch that never committed;
    the table's log (`_delta_log` or `_spark_metadata`) says which belong.
    """
    folder = tables / relative
    if (folder / "_delta_log").is_dir():
        frame = DeltaTable(str(folder)).to_pandas()
        # Delta's timestamps are UTC instants; Spark's parquet files read naive.
        for column in frame.columns:
            if isinstance(frame[column].dtype, pd.DatetimeTZDtype):
                frame[column] = frame[column].dt.tz_convert(None)
        return frame
    return pd.concat(pd.read_parquet(path) for path in committed_files(folder))


def delta_commits(folder: Path) -> list[dict]:
    """A Delta table's commits, oldest first: ``version``, ``operation`` and
    ``txn`` (the (app id, version) pairs of idempotent writes it records)."""
    commits = []
    for path in sorted((folder / "_delta_log").glob("*.json")):
        actions = [json.loads(line) for line in path.read_text().splitlines()]
        commits.append(
            {
                "version": int(path.stem),
                "operation": next(
                    a["commitInfo"]["operation"] for a in actions if "commitInfo" in a
                ),
                "txn": [
                    (a["txn"]["appId"], a["txn"]["version"])
                    for a in actions
                    if "txn" in a
                ],
            }
        )
    return commits


def offset_log(checkpoint: Path) -> list[dict]:
    """The end offset of a query's (one) streaming source for each batch it
    planned, batch 0 first, as its offset log records them."""
    ids = sorted(batch_ids(checkpoint / "offsets"))
    assert ids == list(range(len(ids))), f"{checkpoint}: batches {ids}"
    return [
        json.loads((checkpoint / "offsets" / str(batch)).read_text().splitlines()[2])
        for batch in ids
    ]


def file_source_batches(checkpoint: Path) -> list[list[str]]:
    """The files each micro-batch of a query read from a file source.

    The source's log (``sources/0``, compacted every 10 entries) lists the
    files of each of its own batches; the offset log says up to which of
    them each query batch read (a batch that only moves the watermark reads
    none)."""
    logged: dict[int, set[str]] = {}
    for path in (checkpoint / "sources/0").iterdir():
        if path.name.split(".")[0].isdigit():
            for line in path.read_text().splitlines()[1:]:  # after the version
                entry = json.loads(line)
                logged.setdefault(entry["batchId"], set()).add(entry["path"])
    batches, previous = [], -1
    for end in offset_log(checkpoint):
        read = range(previous + 1, end["logOffset"] + 1)
        batches.append(sorted(path for n in read for path in logged[n]))
        previous = end["logOffset"]
    return batches


def kafka_source_batches(checkpoint: Path) -> list[list[tuple[str, int, int]]]:
    """The (topic, partition, offset) of every message each micro-batch of a
    query read from Kafka: from the offsets the source started at (written
    once, in ``sources/0/0``) to each batch's end offsets."""
    initial = (checkpoint / "sources/0/0").read_bytes().decode().splitlines()[-1]
    previous = json.loads(initial)
    batches = []
    for end in offset_log(checkpoint):
        batches.append(
            [
                (topic, int(partition), offset)
                for topic, partitions in sorted(end.items())
                for partition, stop in sorted(partitions.items())
                for offset in range(previous.get(topic, {}).get(partition, 0), stop)
            ]
        )
        previous = end
    return batches


def delta_source_batches(table: Path, checkpoint: Path) -> list[list[Path]]:
    """The data files of the Delta table ``table`` each micro-batch of a query
    read, from the query's checkpoint.

    Each batch's offsets file ends at (reservoirVersion, index): the source
    has read every file up to that point. Files of the version the query
    started from (``isStartingVersion``) are that version's snapshot, in the
    source's order (modification time, then path); a later version's are its
    commit's ``add`` actions, numbered by their line in the commit. The
    table must be one that is only appended to (no OPTIMIZE).
    """
    ends = offset_log(checkpoint)
    # A first batch that read all of its starting snapshot ends past it (at
    # the next version, not starting): on a table that is only appended to,
    # the snapshot just before that end holds the same files.
    start = ends[0]["reservoirVersion"] - (not ends[0]["isStartingVersion"])
    snapshot = DeltaTable(table, version=start).get_add_actions(flatten=True)
    files = [
        ((start, index), path)
        for index, (_, path) in enumerate(
            sorted(
                zip(
                    snapshot.column("modification_time").to_pylist(),
                    snapshot.column("path").to_pylist(),
                    strict=True,
                )
            )
        )
    ]
    log = table / "_delta_log"
    version = start + 1
    while (log / f"{version:020d}.json").exists():
        lines = (log / f"{version:020d}.json").read_text().splitlines()
        for index, line in enumerate(lines):
            add = json.loads(line).get("add")
            if add and add.get("dataChange", True):
                files.append(((version, index), add["path"]))
        version += 1
    batches, previous = [], (start, -1)
    for end in ends:
        until = (end["reservoirVersion"], end["index"])
        batches.append(
            [table / unquote(path) for key, path in files if previous < key <= until]
        )
        previous = until
    return batches


def local_path(uri: str) -> Path:
    """The local file a URI of Spark's names (``file:/...``, a space escaped
    as ``%20``, as a project under ``My Streams`` has them)."""
    return Path(unquote(urlparse(uri).path))


def landing_records(uri: str) -> list[dict | str]:
    """A landing file's records, line by line, as the reference decodes them."""
    return [decode(line) for line in text_lines(local_path(uri).read_bytes())]


def records_of_rows(rows: pd.DataFrame, messages: dict) -> list[dict | str]:
    """The input records that bronze ``rows`` (one micro-batch's) were made
    from, found by their origin: a Kafka message by its (topic, partition,
    offset) in ``messages``, a file's lines by its path (all of them: a file
    is read whole, in one micro-batch)."""
    records: list[dict | str] = []
    if rows.empty:
        return records
    from_files = rows.source_file.notna()
    for uri, count in rows[from_files].source_file.value_counts().items():
        lines = landing_records(uri)
        assert count == len(lines), f"{count} of the {len(lines)} records of {uri}"
        records += lines
    kafka = rows[~from_files]
    records += [
        decode(messages[origin])
        for origin in zip(
            kafka.kafka_topic, kafka.kafka_partition, kafka.kafka_offset, strict=True
        )
    ]
    return records


# The table each query of the example reads as a stream (bronze_trips reads
# the landing files or the trips topic).
SOURCE_TABLES = {
    "quarantined_trips": "bronze_trips",
    "hourly_borough_summary": "bronze_trips",
    "live_borough_summary": "bronze_trips",
    "hourly_borough_summary_messages": "hourly_borough_summary",
}


def table_batches(tables: Path, query: str) -> list[pd.DataFrame]:
    """The rows of every micro-batch a query read from its source table (Delta,
    or a Spark parquet sink), in batch order, read from its checkpoint."""
    return [
        pd.concat([pd.read_parquet(path) for path in files])
        if files
        else pd.DataFrame(columns=["source_file"])
        for files in source_files(tables, query)
    ]


def source_files(tables: Path, query: str) -> list[list[Path]]:
    """The files of every micro-batch a query read from its source table
    (Delta, or a Spark parquet sink), in batch order, from its checkpoint."""
    checkpoint = tables / "checkpoints" / query
    if "reservoirVersion" in offset_log(checkpoint)[0]:
        table = tables / DELTA_TABLES[SOURCE_TABLES[query]]
        return delta_source_batches(table, checkpoint)
    return [
        [local_path(uri) for uri in batch] for batch in file_source_batches(checkpoint)
    ]


def query_batches(
    project: Path, output_root: str, query: str, messages: dict | None = None
) -> list[list[dict | str]]:
    """The input records of every micro-batch a query of the example ran, in
    batch order, read from its checkpoint: landing lines or Kafka messages
    for ``bronze_trips``, the records behind the bronze rows it read for the
    queries that read bronze.

    Args:
        messages: The trips topic's messages by (topic, partition, offset),
            for a run that reads Kafka.
    """
    tables = project / output_root
    if query != "bronze_trips":
        return [
            records_of_rows(rows, messages or {})
            for rows in table_batches(tables, query)
        ]
    checkpoint = tables / "checkpoints" / query
    if "logOffset" in offset_log(checkpoint)[0]:
        return [
            [record for uri in batch for record in landing_records(uri)]
            for batch in file_source_batches(checkpoint)
        ]
    return [
        [decode(messages[origin]) for origin in batch]
        for batch in kafka_source_batches(checkpoint)
    ]


def sink_batches(tables: Path, query: str) -> set[int]:
    """The batch ids a query's table sink has committed: a Spark parquet
    sink's `_spark_metadata` entries, a Delta sink's transactions.

    A stop can interrupt a batch after its sink committed and before its
    checkpoint did: its rows are in the table, and the next run skips it."""
    folder = tables / DELTA_TABLES.get(query, "-")
    if (folder / "_spark_metadata").is_dir():
        return {
            int(entry.name.split(".")[0])
            for entry in (folder / "_spark_metadata").iterdir()
            if entry.name[0].isdigit()
        }
    if (folder / "_delta_log").is_dir():
        return {txn[1] for commit in delta_commits(folder) for txn in commit["txn"]}
    return set()


def replay(
    project: Path,
    output_root: str,
    query: str,
    messages: dict | None = None,
    live: bool = False,
):
    """The reference's outputs over the micro-batches a query of the example
    ran (`query_batches`) and committed, in its checkpoint or its sink: what
    that query must have written and reported. (A batch planned and not
    committed when a run stopped wrote nothing that counts: the next run runs
    it again.) ``live``: the live summary, which joins the zone table as its
    changes left it."""
    checkpoint = project / output_root / "checkpoints" / query
    offsets = checkpoint / "offsets"
    committed = batch_ids(checkpoint / "commits") | sink_batches(
        project / output_root, query
    )
    ran = sorted(batch for batch in batch_ids(offsets) if batch in committed)
    assert ran == list(range(len(ran))), f"{checkpoint}: committed {ran}"
    watermarks = [
        EPOCH + timedelta(milliseconds=json.loads(lines[1])["batchWatermarkMs"])
        for lines in ((offsets / str(batch)).read_text().splitlines() for batch in ran)
    ]
    return expected_outputs(
        query_batches(project, output_root, query, messages)[: len(ran)],
        zone_boroughs(project / "data/01_raw/taxi_zone_lookup.csv"),
        example_settings(project),
        watermarks,
        live_boroughs=current_boroughs(project / "data/01_raw") if live else None,
    )


def batch_ids(folder: Path) -> set[int]:
    """The batch ids a checkpoint's offsets or commits folder holds."""
    if not folder.is_dir():
        return set()
    return {int(path.name) for path in folder.iterdir() if path.name.isdigit()}


def committed_files(folder: Path) -> list[Path]:
    log = folder / "_spark_metadata"
    batches = sorted(
        (entry for entry in log.iterdir() if entry.name[0].isdigit()),
        key=lambda entry: int(entry.name.split(".")[0]),
    )
    compacts = [i for i, entry in enumerate(batches) if entry.name.endswith(".compact")]
    files: set[str] = set()
    for entry in batches[compacts[-1] if compacts else 0 :]:
        for line in entry.read_text().splitlines()[1:]:  # the first line is the version
            record = json.loads(line)
            (files.add if record["action"] == "add" else files.discard)(record["path"])
    assert files, f"{folder} has no committed files"
    return sorted(local_path(path) for path in files)


DELTA_TABLES = {
    "bronze_trips": "02_intermediate/bronze_trips",
    "quarantined_trips": "02_intermediate/quarantined_trips",
    "hourly_borough_summary": "08_reporting/hourly_borough_summary",
    "live_borough_summary": "08_reporting/live_borough_summary",
}


def assert_one_commit_per_batch(project: Path, output_root: str = "data/delta"):
    """Every micro-batch a query committed is one commit of its Delta table,
    exactly once, tagged with the query's id and the batch id (Delta's
    idempotent-write pair, which makes a replayed batch a no-op).

    The checkpoint says which batches ran (the progress log may miss the last
    batch before a SIGKILL); batch ids have no gaps.
    """
    for query, table in DELTA_TABLES.items():
        committed = batch_ids(project / output_root / "checkpoints" / query / "commits")
        commits = delta_commits(project / output_root / table)
        tagged = [c for c in commits if c["txn"]]
        # The live table's first commit creates it, empty, before its query starts.
        assert [c["operation"] for c in commits if not c["txn"]] == (
            ["WRITE"] if query == "live_borough_summary" else []
        ), query
        assert all(len(c["txn"]) == 1 for c in tagged), query
        assert [c["txn"][0][1] for c in tagged] == list(range(max(committed) + 1)), (
            query
        )
        assert len({c["txn"][0][0] for c in tagged}) == 1, query
