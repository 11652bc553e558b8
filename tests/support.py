"""What the starter's tests share: names, commands, and how outputs are read and
compared with the independent computation in `reference.py`.

Fixtures live in `conftest.py`; test modules import from here and from
`reference` only, never from each other.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import math
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
import venv
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path
from urllib.request import urlopen

import fastavro
import pandas as pd
import pytest
import yaml
from deltalake import DeltaTable
from kafka import KafkaConsumer, KafkaProducer
from prometheus_client.parser import text_string_to_metric_families
from reference import (
    EPOCH,
    SUMMARY_COLUMNS,
    check,
    decode,
    example_settings,
    expected_outputs,
    json_landing_batches,
    text_lines,
    zone_boroughs,
)

STARTER_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(
    os.environ.get(
        "STARTER_REFERENCE_DATA", STARTER_ROOT.parent / "shared" / "reference-data"
    )
)
# kedro-streaming, the plugin every generated project installs: its source,
# tests and docs; the repository's root is its distribution (pyproject.toml).
PLUGIN_ROOT = STARTER_ROOT / "kedro-streaming"
PLUGIN_SOURCE = PLUGIN_ROOT / "src"
PLUGIN_VERSION = re.search(
    r'__version__ = "([^"]+)"',
    (PLUGIN_SOURCE / "kedro_streaming" / "__init__.py").read_text(),
)[1]
PROJECT_NAME = "Taxi Rides"
# The Spark line the suite runs on: cookiecutter.json's default.
SPARK_VERSION = json.loads((STARTER_ROOT / "cookiecutter.json").read_text())[
    "spark_version"
]
PACKAGE = "taxi_rides"
# The SASL user of the test broker (PLAIN and SCRAM-SHA-512); tests check the
# password is never printed. Quotes, a backslash, a semicolon, a line break and
# non-ASCII: a JAAS configuration built without escaping would break on them,
# or take ` unsafe="1"` for an option of its own.
SASL_USER = "taxi-app"
SASL_PASSWORD = f'pw-{uuid.uuid4().hex}" unsafe="1\\;\nü'
# Azure Event Hubs' login shape: this user name, a connection string for password.
EVENT_HUBS_USER = "$ConnectionString"
EVENT_HUBS_PASSWORD = (
    "Endpoint=sb://local.servicebus.windows.net/;SharedAccessKeyName=send;"
    f"SharedAccessKey={uuid.uuid4().hex}="
)

# Bounded, and one landing file (or bronze file) per micro-batch, as the
# reference replays them: the watermark then advances file by file.
FILE_BY_FILE = "max_bytes_per_trigger=1"
BOUNDED = ["--params", f"trigger=available_now,{FILE_BY_FILE}"]
# Bounded, as shipped: whatever has landed is one micro-batch.
AS_SHIPPED = ["--params", "trigger=available_now"]

# The characters of a rejected message's raw payload (realtime/nodes.py).
RAW_PAYLOAD = 100_000
CHUNK = 60  # maxOffsetsPerTrigger: the reference replays batches of this many messages


def quiet_env(**extra: str | None) -> dict[str, str]:
    """The environment of a command the tests run; an ``extra`` of None
    removes that variable."""
    # A wide console, so that Kedro's rich log lines (a progress line names
    # every expectation that caught a record) are not wrapped.
    env = {
        **os.environ,
        "KEDRO_DISABLE_TELEMETRY": "true",
        "DO_NOT_TRACK": "1",
        "COLUMNS": "4000",
        # A run's endpoints on free ports, never the default ones (conftest.py):
        # conf/base/streaming.yml reads these unless --params sets the port.
        "KEDRO_STREAMS_METRICS_PORT": str(free_port()),
        "KEDRO_STREAMS_SPARK_UI_PORT": str(free_port()),
    }
    env.pop("PYTHONPATH", None)
    env.update(extra)
    return {name: value for name, value in env.items() if value is not None}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def tool_service(tool: str, project: Path, project_bin: Path, data_dir: Path, *options):
    """Runs `kedro streams <tool> start` (cluster, connect) on a free port.

    Yields its address (the last word the command prints) and data folder;
    stops it on exit.
    """
    command = [project_bin / "kedro", "streams", tool]
    port = str(free_port())
    started = run(
        [*command, "start", "--data-dir", data_dir, "--port", port, *options],
        cwd=project,
        timeout=300,
    )
    try:
        yield {"address": started.stdout.split()[-1], "data_dir": data_dir}
    finally:
        run([*command, "stop", "--data-dir", data_dir], cwd=project, check=False)


def run(
    command: list,
    cwd: Path,
    timeout: float = 600,
    check: bool = True,
    env: dict[str, str] | None = None,
    **kwargs,
) -> subprocess.CompletedProcess:
    """Runs a command; unless ``check`` is false, fails the test when it fails.

    The result also has ``seconds`` (wall time) and ``output`` (stdout + stderr).
    """
    started = time.monotonic()
    result = subprocess.run(
        command,
        cwd=cwd,
        env=quiet_env(**(env or {})),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        **kwargs,
    )
    result.seconds = time.monotonic() - started
    result.output = result.stdout + result.stderr
    if check and result.returncode != 0:
        pytest.fail(
            f"{' '.join(map(str, command))} exited {result.returncode} in {cwd}\n"
            f"--- stdout ---\n{result.stdout[-8000:]}\n--- stderr ---\n{result.stderr[-8000:]}"
        )
    return result


def generate_project(
    workdir: Path, starter: Path = STARTER_ROOT, **config: str
) -> Path:
    """`kedro new --starter=<this repo> --config`, as a user scripts it.

    Args:
        workdir: Where the project folder is made.
        starter: The starter's clone, this repository by default.
        config: Further keys of the config file, e.g. ``spark_version``.
    """
    # A config file answers every prompt of prompts.yml.
    config = {
        "project_name": PROJECT_NAME,
        "spark_version": SPARK_VERSION,
        "example": "taxi",
        "output_dir": str(workdir),
        **config,
    }
    path = workdir / "config.yml"
    path.write_text(yaml.safe_dump(config))
    kedro_new = [sys.executable, "-m", "kedro", "new", "--starter", str(starter)]
    run([*kedro_new, "--config", str(path), "--telemetry", "no"], cwd=workdir)
    return workdir / config["project_name"].lower().replace(" ", "-")


def generate_away(workdir: Path) -> Path:
    """A project made from a clone of this repository which is then deleted,
    and moved to another folder: what a teammate, a CI runner or a cluster's
    driver has. Nothing of it can point at the clone any more."""
    clone = workdir / "clone"
    shutil.copytree(STARTER_ROOT, clone, ignore=_not_in_a_clone)
    (workdir / "made").mkdir()
    made = generate_project(workdir / "made", clone)
    shutil.rmtree(clone)
    moved = workdir / "moved" / made.name
    shutil.move(made, moved)
    return moved


def _not_in_a_clone(folder: str, names: list[str]) -> list[str]:
    """What a fresh clone does not have: virtualenvs, build output, caches."""
    at_root = Path(folder) == STARTER_ROOT
    return [
        name
        for name in names
        if name in ("__pycache__", ".pytest_cache", ".ruff_cache")
        or name.endswith(".egg-info")
        or (at_root and (name in (".git", "build") or "venv" in name))
    ]


# In a docs page: a whole file (a fenced block whose first line names its
# path), or a block of commands.
PAGE_BLOCK = re.compile(
    r"```(?:(?:python|yaml)\n# (?P<path>\S+)\n(?P<body>.*?)|bash\n(?P<commands>.*?))```",
    re.DOTALL,
)


def walkthrough_project(made: Path, workdir: Path, servers: str, commands=None) -> Path:
    """A copy of a project made with `example: none`, with the files of its
    docs/your-own-stream.md written and, if ``commands`` is given, each
    block of commands handed to it, in the page's order: a command that the
    page shows before the file it needs fails as the reader's would. The
    broker is at ``servers``."""
    project = workdir / made.name
    shutil.copytree(made, project)
    page = (project / "docs/your-own-stream.md").read_text()
    for block in PAGE_BLOCK.finditer(page):
        if block["commands"] is not None:
            if commands is not None:
                commands(block["commands"])
            continue
        target = project / block["path"]
        target.parent.mkdir(parents=True, exist_ok=True)
        body = block["body"]
        if block["path"] == "conf/kafka/globals.yml":
            body = body.replace("localhost:9092", servers)
        target.write_text(f"# {block['path']}\n{body}")
    return project


def assert_tidy_home(project: Path, project_bin: Path) -> None:
    """ruff-clean, no template left, and a README that is a home page: short,
    its examples tests of the project's, every link of it and docs/ alive."""
    for path in project.rglob("*"):
        assert "cookiecutter" not in path.name
        if path.suffix in {".py", ".yml", ".toml", ".md", ".txt"}:
            assert "cookiecutter." not in path.read_text(), path
    run([project_bin / "ruff", "format", "--check", "."], cwd=project)
    run([project_bin / "ruff", "check", "."], cwd=project)
    readme = (project / "README.md").read_text()
    assert len(readme.splitlines()) < 250
    tests = "".join(path.read_text() for path in project.glob("tests/**/test_*.py"))
    examples = re.findall(r"```python\n(.*?)```", readme, re.DOTALL)
    assert examples and all(example in tests for example in examples)
    for page in [project / "README.md", *project.glob("docs/*.md")]:
        for target in re.findall(r"\]\(([^)#:]+)\)", page.read_text()):
            assert (page.parent / target).exists(), (page.name, target)


def make_line_project(workdir: Path, version: str) -> tuple[Path, Path]:
    """A project made for Spark ``version``, in a virtualenv of its own."""
    project = generate_project(workdir, spark_version=version)
    if "pyspark" in PREFETCHES:  # its wheel, built meanwhile, is in pip's cache
        PREFETCHES["pyspark"].join()
    return project, install_project(project, workdir / "venv")


def start_prefetches(cache: Path) -> None:
    """Fetches in the background what later tests download, while the first
    ones run: the schema registry's application (Maven) and the other Spark
    lines' PySpark, built into pip's wheel cache. Each is safe to fetch
    twice at once (the registry's download takes a file lock), and the tests
    that need them wait for them."""

    def registry() -> None:
        sys.path.insert(0, str(PLUGIN_SOURCE))
        module = __import__("kedro_streaming.devtools.registry", fromlist=["_"])
        with contextlib.suppress(Exception):  # the fixture fetches it then
            module.resolve_registry()

    def pyspark() -> None:
        for version in OTHER_SPARK_VERSIONS:
            subprocess.run(
                [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps"]
                + ["-w", str(cache), f"pyspark=={version}"],
                check=False,
                capture_output=True,
            )

    for name, fetch in (("registry", registry), ("pyspark", pyspark)):
        PREFETCHES[name] = threading.Thread(target=fetch, daemon=True)
        PREFETCHES[name].start()


PREFETCHES: dict[str, threading.Thread] = {}


# The other Spark lines tests/test_spark_lines.py runs (comma-separated).
OTHER_SPARK_VERSIONS = [
    version
    for version in os.environ.get("STARTER_OTHER_SPARK_VERSIONS", "4.0.0").split(",")
    if version
]


def install_project(project: Path, env_dir: Path) -> Path:
    """A fresh virtualenv with ``project`` installed, as its README says (the
    dev and connect extras too); returns its bin/ folder."""
    venv.create(env_dir, with_pip=True)
    bin_dir = env_dir / "bin"
    # Editable, so `python -m <package>.<command>` works; the copies the tests
    # run in hold the same code and read their own conf/ and data/. One pip
    # run: one resolve.
    run(
        [
            bin_dir / "python",
            *("-m", "pip", "install", "-q", "--disable-pip-version-check"),
            *("-r", "requirements.txt", "-e", ".[dev,connect]"),
        ],
        cwd=project,
        timeout=1500,
    )
    return bin_dir


def installed_from(bin_dir: Path, package: str) -> dict:
    """Where pip installed ``package`` in the virtualenv from (PEP 610)."""
    found = run(
        [
            bin_dir / "python",
            "-c",
            "import importlib.metadata as m, sys;"
            f"print(m.distribution('{package}').read_text('direct_url.json'))",
        ],
        cwd=bin_dir,
    )
    return json.loads(found.stdout)


def kedro_run(
    bin_dir: Path, project: Path, *args: str, params=BOUNDED, check: bool = True
) -> subprocess.CompletedProcess:
    return run(
        [bin_dir / "kedro", "run", *args, *params],
        cwd=project,
        timeout=600,
        check=check,
    )


def streams(
    bin_dir: Path, project: Path, *args: str, check: bool = True
) -> subprocess.CompletedProcess:
    """`kedro streams <args>` in ``project``."""
    return run([bin_dir / "kedro", "streams", *args], cwd=project, check=check)


def example_reference(
    project: Path, one_batch: bool = False, input_root: Path | None = None
):
    """The example's expected outputs, from the files of ``input_root``.

    Args:
        project: The project, whose parameters the computation follows.
        one_batch: All landed files in one micro-batch (as shipped), else one
            micro-batch per file.
        input_root: Where the run reads its input; the project's data/01_raw
            by default.
    """
    root = input_root or project / "data/01_raw"
    batches = json_landing_batches(root / "trips_landing")
    return expected_outputs(
        [[record for batch in batches for record in batch]] if one_batch else batches,
        zone_boroughs(root / "taxi_zone_lookup.csv"),
        example_settings(project),
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
        batches.append([table / path for key, path in files if previous < key <= until])
        previous = until
    return batches


def landing_records(uri: str) -> list[dict | str]:
    """A landing file's records, line by line, as the reference decodes them."""
    return [
        decode(line)
        for line in text_lines(Path(uri.removeprefix("file:")).read_bytes())
    ]


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
    checkpoint = tables / "checkpoints" / query
    if "reservoirVersion" in offset_log(checkpoint)[0]:
        table = tables / DELTA_TABLES[SOURCE_TABLES[query]]
        batches = delta_source_batches(table, checkpoint)
    else:
        batches = [
            [Path(uri.removeprefix("file:")) for uri in batch]
            for batch in file_source_batches(checkpoint)
        ]
    return [
        pd.concat([pd.read_parquet(path) for path in files])
        if files
        else pd.DataFrame(columns=["source_file"])
        for files in batches
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


def replay(project: Path, output_root: str, query: str, messages: dict | None = None):
    """The reference's outputs over the micro-batches a query of the example
    ran (`query_batches`) and committed, in its checkpoint or its sink: what
    that query must have written and reported. (A batch planned and not
    committed when a run stopped wrote nothing that counts: the next run runs
    it again.)"""
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
    )


def expected_progress(query: str, expected, batch: int) -> dict:
    """The figures the progress log must hold for one micro-batch of a query
    of the example, from the reference's replay of that query's batches."""
    figures = {
        "input_rows": expected.batch_rows[batch],
        "rows_written": 0,
        "quarantined": 0,
        "late_state_rows_dropped": 0,
        "expectations": {},
    }
    if query == "bronze_trips":  # every record: the trips and the rejected
        figures["rows_written"] = expected.batch_rows[batch]
        figures["quarantined"] = expected.batch_rejected[batch]
        figures["expectations"] = {
            rule: count for rule, count in expected.batch_counts[batch].items() if count
        }
    elif query == "quarantined_trips":
        figures["rows_written"] = expected.batch_rejected[batch]
    else:  # the summaries: windows, by the sink's output mode
        figures["late_state_rows_dropped"] = expected.late_groups_by_batch[batch]
        figures["rows_written"] = (
            expected.batch_updated[batch]
            if query == "live_borough_summary"
            else expected.batch_closed[batch]
        )
    return figures


def assert_progress_log(
    project: Path, output_root: str = "data", messages: dict | None = None
) -> None:
    """Every record of the progress log, figure by figure (rows in, rows
    written, quarantined, each rule's count, late state rows dropped), equals
    the reference replaying that query's own micro-batches, read from its
    checkpoint; each batch is logged once at most (a batch that committed
    just before a SIGKILL may be missing: it ran, its report was not read).

    Args:
        messages: The trips topic's messages by (topic, partition, offset),
            for a run that reads Kafka.
    """
    logged: dict[str, list[dict]] = {}
    for record in progress_records(project, output_root):
        logged.setdefault(record["query"], []).append(record)
    assert logged, "the progress log is empty"
    for query, records in logged.items():
        batches = [r["batch"] for r in records]
        assert len(set(batches)) == len(batches), (query, batches)
        if query == "hourly_borough_summary_messages":
            # Publishes the summary's rows as they are: one message per row.
            read = [len(rows) for rows in table_batches(project / output_root, query)]
            want = [
                {"input_rows": read[n], "rows_written": read[n], "quarantined": 0}
                for n in batches
            ]
        else:
            expected = replay(project, output_root, query, messages)
            want = [expected_progress(query, expected, n) for n in batches]
        offsets = project / output_root / "checkpoints" / query / "offsets"
        for record, figures in zip(records, want, strict=True):
            started = datetime.fromisoformat(record["time"]).timestamp()
            if (offsets / str(record["batch"])).stat().st_mtime < started:
                # Planned before a crash, run after it: Spark may report this
                # batch's figures as 0 (seen with a Delta source), so unknown.
                continue
            assert {key: record[key] for key in figures} == figures, (query, record)


def kafka_messages(servers: str, topic: str) -> dict:
    """A topic's messages by (topic, partition, offset)."""
    return {
        (r.topic, r.partition, r.offset): r.value for r in read_topics(servers, [topic])
    }


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
    return sorted(Path(path.removeprefix("file://")) for path in files)


def assert_matches_reference(
    project: Path, expected, output_root: str = "data", live: bool = False
) -> None:
    """Compares every output of a run with the independent computation.

    Args:
        live: Also the `live` pipeline's live_borough_summary (conf/delta).
    """
    tables = project / output_root
    bronze, quarantined = split_bronze(
        read_table(tables, "02_intermediate/bronze_trips")
    )
    summary = read_table(tables, "08_reporting/hourly_borough_summary")

    # The quarantine table: exactly bronze's rejected records, every column.
    table = read_table(tables, "02_intermediate/quarantined_trips")
    assert_same_rows(table, quarantined)

    # Bronze: exactly the valid trips, field by field.
    keys = list(expected.bronze[0])
    want = (
        pd.DataFrame(expected.bronze)[keys]
        .astype(object)
        .where(lambda f: f.notna(), None)
    )
    got = bronze[keys].astype(object).where(lambda f: f.notna(), None)
    sort = lambda frame: sorted(tuple(row) for row in frame.itertuples(index=False))  # noqa: E731
    assert sort(got) == sort(want)

    # Quarantine: every other record, with its reason.
    assert quarantined["rejection_reason"].value_counts().to_dict() == dict(
        expected.rejections
    )
    # A Kafka tombstone has no payload; every other record keeps its own.
    assert (
        quarantined.raw_payload.notna().sum() == len(quarantined) - expected.tombstones
    )

    assert_summary(summary, expected.summary)
    if live:
        assert_summary(
            read_table(tables, "08_reporting/live_borough_summary"), expected.live
        )


def assert_same_rows(got: pd.DataFrame, want: pd.DataFrame) -> None:
    """The same rows (in any order) with the same columns."""
    assert sorted(got.columns) == sorted(want.columns)
    columns = sorted(want.columns)
    rows = lambda frame: sorted(  # noqa: E731
        map(
            repr,
            frame[columns]
            .astype(object)
            .where(frame[columns].notna(), None)
            .itertuples(index=False),
        )
    )
    assert rows(got) == rows(want)


def assert_summary(summary: pd.DataFrame, want: pd.DataFrame) -> None:
    """Every window and borough of a summary table, every figure."""
    got = summary.sort_values(["window_start", "pickup_borough"]).reset_index(drop=True)
    assert list(zip(got.window_start, got.pickup_borough)) == list(
        zip(want.window_start, want.pickup_borough)
    )
    assert (got.window_end == want.window_end).all()
    for column in SUMMARY_COLUMNS:
        for got_value, want_value in zip(got[column], want[column]):
            assert math.isclose(got_value, want_value, rel_tol=1e-9, abs_tol=1e-9) or (
                math.isnan(got_value) and math.isnan(want_value)
            ), (column, got_value, want_value)


def logged_expectations(log: str, query: str = "bronze_trips") -> dict:
    """The records each expectation caught, as a run's console reports them:
    ``batches`` (one ``{rule: count}`` per progress line) and ``ended`` (the
    end-of-run totals line). Rules that caught nothing are not shown."""

    def counts(text: str | None) -> dict[str, int]:
        pairs = re.findall(r"(\w+) (\d+)", text or "")
        return {rule: int(count) for rule, count in pairs}

    stateful = r"(?:, watermark [^,]*, \d+ state rows, \d+ late state rows dropped)?"
    batches = re.findall(
        rf"Query {query} batch \d+: [^\n]*? ms{stateful}"
        r"(?:, expectations: ([\w ,]+))?",
        log,
    )
    ended = re.search(
        rf"Query {query} ended: [^\n]*? quarantined"
        r"(?:, \d+ late state rows dropped)?(?:, expectations: ([\w ,]+))?\.",
        log,
    )
    return {
        "batches": [counts(text) for text in batches],
        "ended": counts(ended[1]) if ended else None,
    }


def assert_expectation_counts(log: str, project: Path, expected) -> None:
    """Per rule, per micro-batch: the console's progress lines, its end-of-run
    totals and the persisted progress log give the reference's counts.

    ``log`` is the console of one run that read every batch ``expected``
    replays, in a project whose progress log holds that run only.
    """
    want = [
        {rule: count for rule, count in batch.items() if count}
        for batch in expected.batch_counts
    ]
    logged = logged_expectations(log)
    assert logged["batches"] == want
    assert logged["ended"] == dict(sum(expected.batch_counts, Counter()))
    records = [
        json.loads(line)
        for line in (project / "data/streams/progress.jsonl").read_text().splitlines()
    ]
    assert [r["expectations"] for r in records if r["query"] == "bronze_trips"] == want
    totals = json.loads((project / "data/streams/totals.json").read_text())
    assert totals["bronze_trips"]["expectations"] == logged["ended"]


def split_bronze(bronze: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """bronze_trips' valid trips, and its rejected records (the quarantine)."""
    rejected = bronze.rejection_reason.notna()
    return bronze[~rejected], bronze[rejected]


def point_at_broker(project: Path, servers: str, chunk: int = CHUNK) -> tuple[str, str]:
    """Points the project's `kafka` environment at ``servers``, with new topics."""
    suffix = uuid.uuid4().hex[:8]
    trips, summary = f"trips-{suffix}", f"summary-{suffix}"
    (project / "conf/kafka/globals.yml").write_text(
        f"output_root: data/kafka\nkafka:\n  bootstrap_servers: {servers}\n"
        f"  trips_topic: {trips}\n  summary_topic: {summary}\n"
        f"  checked_trips_topic: checked-{suffix}\n"
        f"  rejected_trips_topic: rejected-{suffix}\n"
        f"  max_offsets_per_trigger: {chunk}\n"
    )
    return trips, summary


def combine_environments(project: Path, name: str, *envs: str) -> None:
    """Makes conf/<name> from several environments, file by file, the later
    winning key by key: as a user combines Kafka sources with Delta tables."""
    target = project / "conf" / name
    target.mkdir()
    files = {
        path.name for env in envs for path in (project / "conf" / env).glob("*.yml")
    }
    for file_name in sorted(files):
        merged: dict = {}
        for env in envs:
            path = project / "conf" / env / file_name
            if path.exists():
                merged = _merge(merged, yaml.safe_load(path.read_text()) or {})
        (target / file_name).write_text(yaml.safe_dump(merged, sort_keys=False))


def _merge(base: dict, override: dict) -> dict:
    merged = dict(base)
    for key, value in override.items():
        both_mappings = isinstance(value, dict) and isinstance(merged.get(key), dict)
        merged[key] = _merge(merged[key], value) if both_mappings else value
    return merged


DELTA_TABLES = {
    "bronze_trips": "02_intermediate/bronze_trips",
    "quarantined_trips": "02_intermediate/quarantined_trips",
    "hourly_borough_summary": "08_reporting/hourly_borough_summary",
    "live_borough_summary": "08_reporting/live_borough_summary",
}


def progress_records(project: Path, output_root: str = "data") -> list[dict]:
    """The runtime's progress log of an environment: one record per batch."""
    log = project / output_root / "streams/progress.jsonl"
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


def assert_metrics_match_progress_log(
    project: Path,
    output_root: str,
    since: float,
    port: int,
    trigger_interval: float = 1.0,
) -> set[str]:
    """Scrapes a running `kedro run`'s Prometheus endpoint: every series of
    every query equals the progress log's records of this run (those after
    ``since``, a Unix time), the first as many as the endpoint counted (the
    log is written just before the series, and may have gone on since).

    Returns:
        The queries the endpoint serves.
    """
    text = urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    series = {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }

    records = [
        r
        for r in progress_records(project, output_root)
        if unix_time(r["time"]) >= since
    ]
    queries = {
        dict(labels)["query"]
        for name, labels in series
        if name == "kedro_stream_batches_total"
    }
    for query in queries:
        served = {
            (name.removeprefix("kedro_stream_"), labels - {("query", query)}): value
            for (name, labels), value in series.items()
            if ("query", query) in labels and not name.endswith("_created")
        }
        batches = int(served.pop(("batches_total", frozenset())))
        logged = [r for r in records if r["query"] == query]
        assert len(logged) >= batches, (query, batches, len(logged))
        logged = logged[:batches]
        want = {
            (f"{figure}_total", frozenset()): sum(r[key] for r in logged)
            for figure, key in (
                ("input_rows", "input_rows"),
                ("written_rows", "rows_written"),
                ("quarantined_rows", "quarantined"),
                ("late_state_rows_dropped", "late_state_rows_dropped"),
            )
        }
        caught = Counter()
        for record in logged:
            caught.update(record["expectations"])
        want.update(
            (("expectation_records_total", frozenset({("rule", rule)})), count)
            for rule, count in caught.items()
        )
        want[("batch_duration_seconds_count", frozenset())] = batches
        want.update(last_batch_series(logged[-1]) if logged else {})
        for state in ("running", "stopped", "failed"):
            labels = frozenset({("kedro_stream_query_status", state)})
            want[("query_status", labels)] = float(state == "running")
        duration = served.pop(("batch_duration_seconds_sum", frozenset()))
        # Summed batch by batch, in the log's order, as the histogram sums them.
        assert duration == sum(r["duration_ms"] / 1000 for r in logged)
        want[("trigger_interval_seconds", frozenset())] = trigger_interval
        if logged:  # the time since then, at the scrape: a figure of the moment
            assert served.pop(("seconds_since_last_batch", frozenset())) >= 0
        # Spark's status at the scrape, a figure of the moment too: 1 or 0.
        for flag in ("trigger_active", "new_data_available"):
            assert served.pop((flag, frozenset())) in (0.0, 1.0)
        # The histogram's buckets are the durations' distribution: checked by
        # their count and sum above.
        served = {
            k: v for k, v in served.items() if k[0] != "batch_duration_seconds_bucket"
        }
        assert served == want, query
    return queries


def unix_time(iso: str) -> float:
    """Spark's ISO-8601 UTC time as a Unix time."""
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def last_batch_series(last: dict) -> dict:
    """The gauges a query's last progress-log record sets, as
    ``{(series, labels): value}``."""

    want = {
        ("last_batch_timestamp_seconds", frozenset()): unix_time(last["time"])
        + last["duration_ms"] / 1000
    }
    if last["state_rows"] is not None:
        want[("state_rows", frozenset())] = last["state_rows"]
    if last["watermark"]:
        want[("watermark_timestamp_seconds", frozenset())] = unix_time(
            last["watermark"]
        )
    for source in last["sources"]:
        for topic, partitions in (source["kafka_lag"] or {}).items():
            for partition, lag in partitions.items():
                labels = frozenset({("topic", topic), ("partition", partition)})
                want[("kafka_lag_messages", labels)] = lag
    return want


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


def bundled_lines(project: Path) -> list[str]:
    """The non-blank lines of the example's landing files, in name order."""
    landing = sorted((project / "data/01_raw/trips_landing").glob("*.json"))
    return [
        line
        for path in landing
        for line in path.read_text().splitlines()
        if line.strip()
    ]


def consume_all(servers: str, topic: str, expected: int, timeout: float = 60) -> list:
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=servers,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=5000,
    )
    records, deadline = [], time.monotonic() + timeout
    try:
        while len(records) < expected and time.monotonic() < deadline:
            records += list(consumer)
    finally:
        consumer.close()
    return records


def children_of(pid: int) -> set[int]:
    """The processes ``pid`` started that still run (none once it is gone)."""
    children = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):  # the thread or process ended
            children |= set(map(int, (task / "children").read_text().split()))
    return children


def crash(process: subprocess.Popen, spark: set[int] = frozenset()) -> None:
    """SIGKILLs a run started by ``start_kedro``: its process group, and
    Spark's JVM with its Python workers, which the plugin starts in a group
    of their own (``spark``: those groups, seen while the run was alive;
    its children now are added). As close to a crash as it gets; returns
    once they are gone, so that no JVM of this run outlives it."""
    groups = {process.pid, *spark, *children_of(process.pid)}
    for group in groups:
        with contextlib.suppress(ProcessLookupError):  # gone, or not a group
            os.killpg(group, signal.SIGKILL)
    deadline = time.monotonic() + 30
    for pid in groups - {process.pid}:
        while _running(pid):
            assert time.monotonic() < deadline, f"process {pid} outlived SIGKILL"
            time.sleep(0.05)


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"  # a zombie has exited; its parent has not reaped it


def run_until_then_kill(
    bin_dir: Path,
    project: Path,
    marker,
    log_path: Path,
    *args: str,
    command=None,
    state=lambda: "",
) -> None:
    """Starts a bounded `kedro run` (or ``command`` with its arguments),
    SIGKILLs its process group once ``marker`` is logged (or, for a function,
    once it returns true). ``state()`` says what a failure message should
    add to the log's end."""
    reached = marker if callable(marker) else lambda: marker in log_path.read_text()
    process = start_kedro(
        bin_dir, project, ["run", *args, *BOUNDED], log_path, command=command
    )
    spark: set[int] = set()  # known before the run may kill itself
    try:
        deadline = time.monotonic() + 300
        while not reached():
            spark |= children_of(process.pid)
            if process.poll() is not None:  # ended, or killed itself
                assert reached(), (
                    f"ended before {marker!r}:\n{log_path.read_text()[-4000:]}"
                    f"\n{state()}"
                )
                break
            assert time.monotonic() < deadline, f"never logged {marker!r}"
            time.sleep(0.05 if callable(marker) else 0.2)
    finally:
        crash(process, spark)
        process.wait(timeout=60)


def bad_messages(template: dict, rule_breakers: list[dict]) -> list[bytes | None]:
    """Every kind of bad Kafka message the ingest pipeline must quarantine, and
    trips that break each expectation (``tools.trips.rule_breaking_trips``)."""

    def record(**changes) -> bytes:
        return json.dumps({**template, **changes}).encode()

    garbage = random.Random(7).randbytes(300)
    return [
        b"this is not json",
        b"\xff\xfe" + garbage,  # binary, not UTF-8
        record(passenger_count="two", fare_amount="ten"),  # wrong types
        record(trip_distance={"km": 3}),  # an object for a number
        # required fields missing
        json.dumps({"VendorID": 2, "store_and_fwd_flag": "N"}).encode(),
        b"",  # empty message
        None,  # null value (tombstone)
        record(PULocationID="x" * 1_000_000),  # about 1 MB
        record(fare_amount=-12.5, total_amount=-14.3),  # negative amounts
        record(total_amount=99_999_999.0),  # absurd amount
        # dropoff before pickup
        record(
            lpep_pickup_datetime=template["lpep_dropoff_datetime"],
            lpep_dropoff_datetime="2024-03-01 05:00:00",
        ),
        record(PULocationID=999, DOLocationID=0),  # unknown location IDs
        b"[]",
        b"42",
        b"null",
        b'{"VendorID": 2, "lpep_pickup_datetime": "2024-03-',  # truncated
        record(trip_distance=99_999.0),  # an impossible distance
        record(store_and_fwd_flag="N" * 1_000_000),  # a megabyte in a one-letter flag
        *[json.dumps(trip).encode() for trip in rule_breakers],
    ]


def send_to_one_partition(servers: str, topic: str, messages: list) -> None:
    producer = KafkaProducer(
        bootstrap_servers=servers, acks="all", max_request_size=2_000_000
    )
    try:
        for message in messages:
            # A tombstone needs a key: Kafka refuses a message with neither.
            key = b"tombstone" if message is None else None
            producer.send(topic, key=key, value=message, partition=0)
        producer.flush()
    finally:
        producer.close()


def payload(message: bytes | None) -> str | None:
    """What `raw_payload` must hold for a message: its text, or base64 bytes."""
    if message is None:
        return None
    try:
        return message.decode("utf-8")
    except UnicodeDecodeError:
        return base64.b64encode(message).decode()


def avro_values(registry, records) -> list[tuple[int, dict]]:
    """Each record's value decoded from Confluent's framing with fastavro (not
    Spark): its schema id and its record, timestamps as naive UTC."""
    parsed: dict[int, object] = {}
    values = []
    for record in records:
        value = record.value
        assert value[:1] == b"\x00", value[:5]
        schema_id = int.from_bytes(value[1:5], "big")
        if schema_id not in parsed:
            parsed[schema_id] = fastavro.parse_schema(
                json.loads(registry.schema(schema_id))
            )
        decoded = fastavro.schemaless_reader(io.BytesIO(value[5:]), parsed[schema_id])
        values.append(
            (
                schema_id,
                {
                    name: field.astimezone(timezone.utc).replace(tzinfo=None)
                    if isinstance(field, datetime)
                    else field
                    for name, field in decoded.items()
                },
            )
        )
    return values


def read_topics(servers: str, topics: list[str]) -> list:
    consumer = KafkaConsumer(
        *topics,
        bootstrap_servers=servers,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=1500,
    )
    try:
        return list(consumer)
    finally:
        consumer.close()


def wait_for_offsets(servers, topics, count, *, process, log, timeout=180) -> list:
    """The output messages, once every input offset below ``count`` has one."""
    deadline = time.monotonic() + timeout
    while True:
        records = read_topics(servers, topics)
        offsets = {json.loads(r.value)["kafka_offset"] for r in records}
        if offsets >= set(range(count)):
            return records
        assert process.poll() is None, log.read_text()[-5000:]
        assert time.monotonic() < deadline, (
            f"{len(offsets)} of {count} offsets out:\n{log.read_text()[-5000:]}"
        )
        time.sleep(1)


def assert_each_message(project, records, messages, trips_topic, outputs) -> dict:
    """Each input offset on the topic of its verdict, with the reference's
    reasons, payload, fields and zones, and its origin; returns the output
    messages by input offset."""
    boroughs = zone_boroughs(project / "data/01_raw/taxi_zone_lookup.csv")
    by_offset: dict[int, list] = {}
    for record in records:
        message = json.loads(record.value)
        by_offset.setdefault(message["kafka_offset"], []).append((record, message))
    assert sorted(by_offset) == list(range(len(messages)))
    for offset, copies in by_offset.items():
        trip, reason = check(decode(messages[offset]), set(boroughs))
        for record, message in copies:
            assert record.topic == outputs[reason is not None], offset
            assert message["rejection_reason"] == reason, offset
            assert message["kafka_topic"] == trips_topic
            assert message["kafka_partition"] == 0
            if reason:  # its payload, cut where Kafka's size limit needs it
                whole = payload(messages[offset])
                assert message["raw_payload"] == (whole and whole[:RAW_PAYLOAD])
                assert message["raw_payload_truncated"] == (
                    len(whole or "") > RAW_PAYLOAD
                )
            else:
                assert message["raw_payload"] is None
            if trip is not None:
                assert_same_trip(message, trip, boroughs)
        assert [m for _, m in copies].count(copies[0][1]) == len(copies)  # same copies

    return by_offset


def assert_same_trip(message: dict, trip: dict, boroughs: dict[int, str]) -> None:
    """A valid trip's message: every field of the reference's typed trip."""
    for name, want in trip.items():
        got = message[name]
        if isinstance(want, datetime) and isinstance(got, str):  # JSON's text
            got = datetime.fromisoformat(got.replace("Z", "+00:00")).replace(
                tzinfo=None
            )
        assert got == want, (name, got, want)
    assert message["pickup_borough"] == boroughs.get(trip["PULocationID"])
    assert message["dropoff_borough"] == boroughs.get(trip["DOLocationID"])


def start_kedro(bin_dir: Path, project: Path, args: list, log: Path, command=None):
    """Starts `kedro <args>` (or ``command`` with them) in ``project``, in a
    process group of its own, its output in ``log``."""
    return subprocess.Popen(
        [*(command or [bin_dir / "kedro"]), *args],
        cwd=project,
        env=quiet_env(),
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


class Scraper:
    """Scrapes a Prometheus endpoint every ``interval`` seconds from a thread of
    its own, as Prometheus does, and keeps every scrape that answered.

    ``scrapes`` holds ``(unix time, {labels: value})``, the labels a frozenset
    of ``(name, value)`` pairs with ``__name__``, as `promql` takes them.
    """

    def __init__(self, port: int, interval: float = 1.0) -> None:
        self.url = f"http://127.0.0.1:{port}/metrics"
        self.interval = interval
        self.scrapes: list[tuple[float, dict[frozenset, float]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Scraper:
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        next_scrape = time.monotonic()
        while not self._stop.is_set():
            with contextlib.suppress(OSError):  # not serving yet, or any more
                at = time.time()
                text = urlopen(self.url, timeout=5).read().decode()
                values = {
                    frozenset({("__name__", sample.name), *sample.labels.items()}): (
                        sample.value
                    )
                    for family in text_string_to_metric_families(text)
                    for sample in family.samples
                }
                self.scrapes.append((at, values))
            next_scrape += self.interval
            self._stop.wait(max(0.0, next_scrape - time.monotonic()))

    def mark(self) -> int:
        """The index the next scrape will have: where a phase of a test begins."""
        return len(self.scrapes)

    def samples(self, step: float | None = None) -> dict[frozenset, list]:
        """Every series as ``[(time, value)]``; with ``step``, scrape ``i`` at
        ``i * step`` instead of its time."""
        series: dict[frozenset, list] = {}
        for index, (at, values) in enumerate(self.scrapes):
            for labels, value in values.items():
                series.setdefault(labels, []).append(
                    (index * step if step else at, value)
                )
        return series


def start_continuous_kafka_run(
    bin_dir: Path, project: Path, log_path: Path, *args: str, params: str = ""
) -> subprocess.Popen:
    """`kedro run --env kafka` at a 1-second trigger (and ``params``), its
    output in ``log_path``, in a process group of its own (so that a test can
    kill it whole)."""
    with log_path.open("w") as log:
        return subprocess.Popen(
            [
                bin_dir / "kedro",
                "run",
                "--env",
                "kafka",
                *args,
                "--params",
                ",".join(filter(None, ["trigger_interval=1 second", params])),
            ],
            cwd=project,
            env=quiet_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def bad_certificates(certificates, tls_dir: Path) -> dict[str, Path]:
    """PEM key stores signed by the broker's CA, each wrong in one way, for
    extra SSL listeners of the test broker: ``EXPIRED``, ``NOT_YET_VALID``
    and ``OTHER_HOST`` (a certificate for kafka.example.com only)."""
    ca = certificates.CertificateAuthority.load(tls_dir)
    now = datetime.now(timezone.utc)
    local = ("localhost", "127.0.0.1")
    issued = {
        "EXPIRED": ca.issue(
            "localhost",
            hosts=local,
            valid_from=now - timedelta(days=30),
            valid_until=now - timedelta(days=1),
        ),
        "NOT_YET_VALID": ca.issue(
            "localhost",
            hosts=local,
            valid_from=now + timedelta(days=1),
            valid_until=now + timedelta(days=30),
        ),
        "OTHER_HOST": ca.issue("kafka.example.com", hosts=("kafka.example.com",)),
    }
    stores = {}
    for name, (key, certificate) in issued.items():
        stores[name] = tls_dir / f"{name.lower()}.pem"
        stores[name].write_bytes(ca.key_and_chain_pem(key, certificate))
    return stores


def java_trust_store(tls_dir: Path) -> Path:
    """The broker CA's trust store as JKS (made from its PKCS12 one by keytool)."""
    jks = tls_dir / "truststore.jks"
    if not jks.exists():
        password = (tls_dir / "store-password").read_text()
        subprocess.run(
            [
                "keytool",
                "-importkeystore",
                "-noprompt",
                *(
                    "-srckeystore",
                    tls_dir / "truststore.p12",
                    "-srcstoretype",
                    "PKCS12",
                ),
                *("-destkeystore", jks, "-deststoretype", "JKS"),
                *("-srcstorepass:env", "KS_PASSWORD"),
                *("-deststorepass:env", "KS_PASSWORD"),
            ],
            env={**os.environ, "KS_PASSWORD": password},
            check=True,
            capture_output=True,
        )
    return jks


def secure_kafka(
    monkeypatch,
    broker,
    listener: str,
    *,
    stores: str = "PEM",
    mechanism: str = "PLAIN",
    login: tuple[str, str] = (SASL_USER, SASL_PASSWORD),
) -> str:
    """Has every command the test runs reach ``broker`` through its TLS
    ``listener`` (SSL, MTLS or SASL_SSL), set up as docs/kafka.md says: the
    variables conf/kafka/credentials.yml reads. Returns the listener's address.

    Args:
        stores: ``PEM`` (ca.pem, client.pem), ``PKCS12`` or ``JKS`` (the trust
            store; the key store is then PKCS12).
        mechanism: The SASL mechanism on SASL_SSL.
        login: Its username and password.
    """
    tls = broker.tls_dir
    password = (tls / "store-password").read_text()
    env = {"KAFKA_SECURITY_PROTOCOL": "SASL_SSL" if listener == "SASL_SSL" else "SSL"}
    if stores == "PEM":
        env |= {
            "KAFKA_SSL_TRUSTSTORE_LOCATION": str(tls / "ca.pem"),
            "KAFKA_SSL_TRUSTSTORE_TYPE": "PEM",
        }
    else:
        trust = java_trust_store(tls) if stores == "JKS" else tls / "truststore.p12"
        env |= {
            "KAFKA_SSL_TRUSTSTORE_LOCATION": str(trust),
            "KAFKA_SSL_TRUSTSTORE_TYPE": stores,
            "KAFKA_SSL_TRUSTSTORE_PASSWORD": password,
        }
    if listener == "MTLS":
        env |= (
            {
                "KAFKA_SSL_KEYSTORE_LOCATION": str(tls / "client.pem"),
                "KAFKA_SSL_KEYSTORE_TYPE": "PEM",
            }
            if stores == "PEM"
            else {
                "KAFKA_SSL_KEYSTORE_LOCATION": str(tls / "client.p12"),
                "KAFKA_SSL_KEYSTORE_TYPE": "PKCS12",
                "KAFKA_SSL_KEYSTORE_PASSWORD": password,
            }
        )
    if listener == "SASL_SSL":
        env |= {
            "KAFKA_SASL_MECHANISM": mechanism,
            "KAFKA_SASL_USERNAME": login[0],
            "KAFKA_SASL_PASSWORD": login[1],
        }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return broker.tls_bootstrap_servers[listener]


def user_caches() -> list[Path]:
    """The folders a project's runs write outside it (kedro_streaming.session):
    the jars Spark's packages resolved to, the JVM's class-data archives."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return [root / "spark-packages", root / "spark-class-archives"]


def files_holding(roots: list[Path], secrets: tuple[str, ...]) -> list[Path]:
    """The files below ``roots`` that hold any of ``secrets`` (as UTF-8)."""
    needles = [secret.encode() for secret in secrets]
    return [
        path
        for root in roots
        for path in root.rglob("*")
        if path.is_file() and any(needle in path.read_bytes() for needle in needles)
    ]


def assert_serves_no_secret(
    ui_port: int, metrics_port: int, query: str, secrets: tuple[str, ...]
) -> None:
    """What a running project serves holds none of ``secrets``: the Spark UI's
    REST API and pages (the application's environment, jobs, SQL plans with
    their Kafka options, the streaming ``query``) and the metrics endpoint."""
    ui = f"http://127.0.0.1:{ui_port}"
    with urlopen(f"{ui}/api/v1/applications", timeout=10) as answer:
        app = json.loads(answer.read())[0]["id"]
    addresses = [
        *(
            f"{ui}/api/v1/applications/{app}/{path}"
            for path in ("environment", "jobs", "stages", "sql?details=true")
        ),
        *(f"{ui}/{page}/" for page in ("jobs", "SQL", "environment", "StreamingQuery")),
        f"http://127.0.0.1:{metrics_port}/metrics",
    ]
    pages = {}
    for address in addresses:
        with urlopen(address, timeout=10) as answer:
            pages[address] = answer.read().decode("utf-8", errors="replace")
    assert "spark.master" in pages[addresses[0]]
    assert any(query in text for text in pages.values())
    leaks = [page for page, text in pages.items() if any(x in text for x in secrets)]
    assert leaks == []
