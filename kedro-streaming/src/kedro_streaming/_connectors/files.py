"""Files as sources and sinks (parquet, json, csv, orc, text, avro) and the
checkpoints beside them: what a folder must be before a query starts."""

from __future__ import annotations

import json
import os
import urllib.parse
from pathlib import Path
from typing import TYPE_CHECKING

import fsspec

from kedro_streaming._connectors.base import Connector, Entry, RunEntries
from kedro_streaming._connectors.file_sink_log import files_written
from kedro_streaming.problems import Problem, closest

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from kedro_streaming._connectors.options import OptionNames

FILE_FORMATS = ("parquet", "json", "csv", "orc", "text", "avro")
# Files that carry their schema, merged across files (footers); files whose
# schema Spark fixes (text: one `value` column).
_SELF_DESCRIBING = ("parquet", "orc")
_SCHEMA_FIXED = ("text",)
_FILE_OPTION_CLASSES = {
    "csv": "org.apache.spark.sql.catalyst.csv.CSVOptions$",
    "json": "org.apache.spark.sql.catalyst.json.JSONOptions$",
    "parquet": "org.apache.spark.sql.execution.datasources.parquet.ParquetOptions$",
    "orc": "org.apache.spark.sql.execution.datasources.orc.OrcOptions$",
    "text": "org.apache.spark.sql.execution.datasources.text.TextOptions$",
}
# The file stream source's own options (FileStreamOptions has no list), and
# those of every file source; modifiedBefore/After are batch only.
_FILE_STREAM_OPTIONS = (
    "maxFilesPerTrigger",
    "maxBytesPerTrigger",
    "maxFileAge",
    "latestFirst",
    "fileNameOnly",
    "cleanSource",
    "sourceArchiveDir",
    "maxCachedFiles",
    "discardCachedInputRatio",
    "pathGlobFilter",
    "recursiveFileLookup",
    "ignoreCorruptFiles",
    "ignoreMissingFiles",
    "basePath",
)
_FILE_SINK_OPTIONS = ("maxRecordsPerFile", "retention")


def _sinks_inside_sources(
    sinks: dict[str, Entry], sources: dict[str, Entry]
) -> list[str]:
    """Sinks inside (or around) a source's folder: they would read themselves."""
    problems = []
    for sink, sink_dataset in sinks.items():
        for source, source_dataset in sources.items():
            if not (sink_dataset.path and source_dataset.path):
                continue
            inner, outer = _folder(sink_dataset.path), _folder(source_dataset.path)
            if inner == outer or outer in inner.parents or inner in outer.parents:
                problems.append(
                    f"'{sink}' writes to '{sink_dataset.path}', inside or around "
                    f"the folder '{source_dataset.path}' that '{source}' reads: the "
                    "stream would read its own output. Give the sink a folder of "
                    "its own, outside the source's"
                )
    return problems


def normal_path(path: str) -> str:
    """One spelling per place: ``data/x/``, ``./data/x`` and its absolute path."""
    if "://" in path and not path.startswith("file://"):
        return path.rstrip("/")
    return str(_folder(path))


def _file_sinks_ahead_of_their_checkpoint(sinks: dict[str, Entry]) -> list[str]:
    """File sinks with a new checkpoint whose ``_spark_metadata`` log has batches:
    Spark would skip as many new batches without writing them."""
    problems = []
    for name, dataset in sinks.items():
        if dataset.file_format not in FILE_FORMATS or not dataset.path:
            continue
        # No checkpoint (or a misspelt key) is named on its own: its fix is
        # that line, not a reset.
        if not dataset.checkpoint or dataset.foreach_batch:
            continue
        if has_progress(dataset.checkpoint):
            continue
        fs, root = fsspec.core.url_to_fs(dataset.path)
        log = f"{root}/_spark_metadata"
        batches = (
            [
                entry
                for entry in fs.ls(log, detail=False)
                if entry.rstrip("/").rsplit("/", 1)[-1].split(".")[0].isdigit()
            ]
            if fs.exists(log)
            else []
        )
        if batches:
            problems.append(
                f"'{name}' has a new checkpoint, but its folder '{dataset.path}' already "
                f"holds {len(batches)} batches written under an earlier one: "
                "Spark's file sink would skip as many batches of the new query "
                f"without writing them. Start both afresh with `kedro streams "
                f"reset {name}`, or give the sink a new folder"
            )
    return problems


def _local(path: str) -> bool:
    return "://" not in path or path.startswith("file:")


def _folder(path: str) -> Path:
    return Path(os.path.abspath(path.removeprefix("file://")))


def has_progress(checkpoint: str | None) -> bool:
    """Whether a query has run on ``checkpoint`` (it has an offsets log)."""
    if not checkpoint:
        return False
    fs, root = fsspec.core.url_to_fs(checkpoint)
    offsets = f"{root}/offsets"
    return fs.exists(offsets) and bool(fs.ls(offsets, detail=False))


def source_position(checkpoint: str | None) -> list[str]:
    """Where a query's sources stand: the source lines of its checkpoint's last
    offsets file (empty for a new checkpoint)."""
    if not has_progress(checkpoint):
        return []
    fs, root = fsspec.core.url_to_fs(checkpoint)
    batches = [
        entry.rstrip("/").rsplit("/", 1)[-1]
        for entry in fs.ls(f"{root}/offsets", detail=False)
    ]
    last = max((int(b) for b in batches if b.isdigit()), default=None)
    if last is None:
        return []
    lines = fs.cat_file(f"{root}/offsets/{last}").decode().splitlines()
    return [line for line in lines[2:] if line.strip()]


def source_problems(entry: Entry, *, has_schema: bool) -> list[str]:
    """What keeps a folder from being read: missing, or no schema to read by."""
    path = entry.path
    missing = missing_local_folder(path)
    if missing:
        return [missing]
    if has_schema or (path and _is_local_file_sink(path)):
        return []
    return [
        Problem(
            f"reads {entry.file_format} files from '{path}' without a schema",
            "add `load_args: {schema: {filepath: <Spark JSON schema>}}` (or a DDL "
            "string). If the folder is a streaming sink, run the pipeline that "
            "writes it first (`kedro run --pipelines <name>`)",
            id="FILES_SOURCE_WITHOUT_SCHEMA",
        )
    ]


def _is_local_file_sink(path: str) -> bool:
    """Whether ``path`` is a streaming file sink's folder (remote: assumed so)."""
    if "://" in path and not path.startswith("file://"):
        return True
    return (Path(path.removeprefix("file://")) / "_spark_metadata").is_dir()


def missing_local_folder(path: str | None) -> Problem | None:
    """Says so when local folder ``path`` does not exist, naming close ones."""
    if not path or ("://" in path and not path.startswith("file://")):
        return None
    folder = Path(path.removeprefix("file://"))
    if folder.exists():
        return None
    parent = next((p for p in folder.parents if p.is_dir()), None)
    siblings = (
        [p.name for p in parent.iterdir() if p.is_dir()] if parent is not None else []
    )
    close = closest(folder.name, siblings, many=2)
    hint = (
        " (beside it: " + ", ".join(f"'{parent / name}'" for name in close) + ")"
        if close
        else ""
    )
    return Problem(
        f"reads '{path}', which does not exist{hint}",
        "fix its filepath; or create the folder, if files are to land there "
        "(git keeps no empty folder: a .gitkeep file in it keeps it in a clone); "
        "or, if another pipeline's sink writes it, run that pipeline first "
        "(`kedro run --pipelines <name>`)",
        id="SOURCE_FOLDER_MISSING",
    )


class Files(Connector):
    """File sources and sinks, one instance per format (the run's checks take
    the one without)."""

    name = "files"
    formats = FILE_FORMATS
    only_appends = True

    def __init__(self, file_format: str = "") -> None:
        super().__init__(file_format)
        self.takes_schema = file_format not in _SCHEMA_FIXED
        self.self_describing = file_format in _SELF_DESCRIBING

    def source_problems(self, entry: Entry) -> list[Problem]:
        given = entry.schema is not None or not self.takes_schema
        return source_problems(entry, has_schema=given)

    def option_names(self, names: OptionNames, direction: str) -> list[str] | None:
        if self.file_format not in _FILE_OPTION_CLASSES:
            return None
        own = names.scala_set(_FILE_OPTION_CLASSES[self.file_format], "getAllOptions")
        extra = _FILE_STREAM_OPTIONS if direction == "source" else _FILE_SINK_OPTIONS
        return [*own, *extra]

    def holds_data(self, entry: Entry) -> bool:
        if not entry.path:
            return False
        fs, root = fsspec.core.url_to_fs(entry.path)
        return fs.exists(root)

    def batch_output(
        self, spark: SparkSession, entry: Entry, query_id: str, batch: int
    ) -> DataFrame | None:
        files = files_written(entry.path, batch) if entry.path else None
        if files is None:
            return None
        reader = spark.read.format(self.file_format).options(**entry.load_options)
        if entry.schema is not None:
            reader = reader.schema(entry.schema)
        # The folder as the base: partition columns come from the files' paths.
        reader = reader.option("basePath", entry.path)
        return reader.load(files) if files else reader.load(entry.path).limit(0)

    def problems(self, run: RunEntries) -> list[str]:
        return (
            _sinks_inside_sources(run.sinks, run.sources)
            + _file_sinks_ahead_of_their_checkpoint(run.sinks)
            + _logs_of_another_folder(run)
        )


def _logs_of_another_folder(run: RunEntries) -> list[str]:
    """Checkpoints or file sink logs that name another folder's files: a project
    moved with them would fail at the first batch (Spark keeps absolute paths)."""
    problems = []
    for name, sink in run.sinks.items():
        folders = [
            _folder(entry.path)
            for entry in run.read_by(name).values()
            if entry.file_format in FILE_FORMATS and entry.path
        ]
        # One log per source of the query (sources/<i>, in the plan's order,
        # which the catalog does not give): each must lie in a folder read.
        recorded = _recorded_source_folders(sink.checkpoint) if folders else []
        elsewhere = [r for r in recorded if not any(_inside(r, f) for f in folders)]
        if elsewhere:
            problems.append(
                f"'{name}' has a checkpoint that read "
                f"{' and '.join(repr(str(r)) for r in elsewhere)}, not "
                f"{' or '.join(repr(str(f)) for f in folders)}: the project "
                "(or its data) moved with its checkpoints, which keep absolute "
                "paths, and Spark would fail at the first batch. Start the "
                f"query afresh here with `kedro streams reset {name}`, or run "
                "it where it was"
            )
        if sink.file_format in FILE_FORMATS and sink.path and _local(sink.path):
            written = _recorded_folder(_folder(sink.path) / "_spark_metadata")
            if written and not _inside(written, _folder(sink.path)):
                problems.append(
                    f"'{name}' has a log that names files in '{written}', not in "
                    f"its folder '{sink.path}': the project (or its data) moved, "
                    "and Spark's file sink keeps absolute paths, so a stream "
                    "over it would fail. Start it afresh here with `kedro "
                    f"streams reset {name}`, or run it where it was"
                )
    return problems


def _recorded_source_folders(checkpoint: str | None) -> list[Path]:
    """The folder each file source of a local checkpoint last read from."""
    if not checkpoint or not _local(checkpoint):
        return []
    logs = (_folder(checkpoint) / "sources").glob("*")
    return [f for log in sorted(logs) if (f := _recorded_folder(log)) is not None]


def _recorded_folder(log: Path) -> Path | None:
    """The folder of the first file the newest entry of a Spark file log names."""
    entries = [p for p in log.glob("*") if p.name.split(".")[0].isdigit()]
    if not entries:
        return None
    newest = max(entries, key=lambda p: int(p.name.split(".")[0]))
    for line in newest.read_text(errors="replace").splitlines()[1:]:
        try:
            path = json.loads(line)["path"]
        except (ValueError, KeyError, TypeError):
            continue
        # A URI: Hadoop escapes a space (and %) in it, not other letters.
        return Path(urllib.parse.unquote(urllib.parse.urlparse(path).path)).parent
    return None


def _inside(path: Path, folder: Path) -> bool:
    # Through symlinks: a project opened by a linked folder is the same one.
    path, folder = Path(os.path.realpath(path)), Path(os.path.realpath(folder))
    return path == folder or folder in path.parents
