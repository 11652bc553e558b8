"""What the runtime records beside the queries, in ``state_dir``: the
progress log (``progress.jsonl``, rotated to ``progress.1.jsonl`` past
``max_bytes``), ``totals.json`` per query since its last reset, and
``running/<query>.json`` with a heartbeat while a query runs.

JSON lines, not a Spark table: a table would cost a Spark job per
micro-batch; ``status`` reads the lines without Spark.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from kedro.config import MissingConfigException

from kedro_streaming._connectors.kafka.connector import kafka_lag
from kedro_streaming._observe.state_operators import state_operators
from kedro_streaming.errors import StreamingConfigError

PROGRESS_FILE = "progress.jsonl"
TOTALS_FILE = "totals.json"
RUNNING_DIR = "running"
HEARTBEAT_SECONDS = 5.0
# A heartbeat older than this: the process died without cleaning up (kill -9).
STALE_SECONDS = 30.0
DEFAULT_STATE_DIR = "data/streams"
DEFAULT_MAX_BYTES = 10 * 1024 * 1024
TOTAL_KEYS = (
    "batches",
    "input_rows",
    "rows_written",
    "quarantined",
    "late_state_rows_dropped",
)


class StreamState:
    """The progress log, totals and running markers of one ``state_dir``."""

    def __init__(self, state_dir: str, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if "://" in state_dir and not state_dir.startswith("file://"):
            raise StreamingConfigError(
                f"state_dir '{state_dir}' in streaming.yml is not a local folder: "
                "the runtime appends to its log with plain file writes. Set it to "
                "a local or mounted path."
            )
        self.path = Path(state_dir.removeprefix("file://"))
        self.max_bytes = max_bytes
        self._last_heartbeat = 0.0

    @classmethod
    def from_settings(cls, settings: dict[str, Any]) -> StreamState:
        """The state of ``streaming.yml``'s ``state_dir`` and ``progress_log_max_bytes``."""
        return cls(
            str(settings.get("state_dir", DEFAULT_STATE_DIR)),
            int(settings.get("progress_log_max_bytes", DEFAULT_MAX_BYTES)),
        )

    @property
    def progress_files(self) -> list[Path]:
        """The log's files, oldest first."""
        files = [self.path / "progress.1.jsonl", self.path / PROGRESS_FILE]
        return [path for path in files if path.is_file()]

    def append(self, record: dict[str, Any]) -> None:
        """Appends one micro-batch's record and adds it to its query's totals."""
        self.path.mkdir(parents=True, exist_ok=True)
        log = self.path / PROGRESS_FILE
        with log.open("a") as output:
            output.write(json.dumps(record, sort_keys=True) + "\n")
        if log.stat().st_size > self.max_bytes:
            log.replace(self.path / "progress.1.jsonl")
        totals = self.totals()
        query = totals.setdefault(record["query"], dict.fromkeys(TOTAL_KEYS, 0))
        query["batches"] += 1
        for key in TOTAL_KEYS[1:]:
            query[key] += record.get(key, 0)
        for kind in ("expectations", "changes", "versions"):
            for what, count in record.get(kind, {}).items():
                summed = query.setdefault(kind, {})
                summed[what] = summed.get(what, 0) + count
        query["last_batch"], query["last_time"] = record["batch"], record["time"]
        if record.get("state_operators"):  # the state as of the last batch
            query["state_operators"] = record["state_operators"]
        self._write_json(self.path / TOTALS_FILE, totals)

    def records(self) -> list[dict[str, Any]]:
        """Every record the log still holds, oldest first."""
        return [
            json.loads(line)
            for path in self.progress_files
            for line in path.read_text().splitlines()
            if line.strip()
        ]

    def totals(self) -> dict[str, dict[str, Any]]:
        """Per query, the sums since its last reset."""
        try:
            return json.loads((self.path / TOTALS_FILE).read_text())
        except (OSError, ValueError):
            return {}

    def note_unlogged(self, query: str, checkpoint: str | None) -> list[int]:
        """The batches ``checkpoint`` committed after the query's last logged
        one (a run killed between), now counted as ``unlogged_batches``."""
        totals = self.totals()
        logged = totals.get(query, {}).get("last_batch")
        committed = last_committed_batch(checkpoint)
        if logged is None or committed is None or committed <= logged:
            return []
        missed = list(range(logged + 1, committed + 1))
        entry = totals[query]
        entry["unlogged_batches"] = entry.get("unlogged_batches", 0) + len(missed)
        entry["last_batch"] = committed
        self._write_json(self.path / TOTALS_FILE, totals)
        return missed

    def forget(self, queries: set[str]) -> None:
        """Drops the totals of reset queries; their old records stay in the log."""
        totals = {k: v for k, v in self.totals().items() if k not in queries}
        if (self.path / TOTALS_FILE).exists():
            self._write_json(self.path / TOTALS_FILE, totals)

    def heartbeat(self, queries: list[str], force: bool = False) -> None:
        """Records that this process runs ``queries`` (every few seconds at most)."""
        now = time.time()
        if not force and now - self._last_heartbeat < HEARTBEAT_SECONDS:
            return
        self._last_heartbeat = now
        running = self.path / RUNNING_DIR
        running.mkdir(parents=True, exist_ok=True)
        for query in queries:
            self._write_json(
                running / f"{query}.json",
                {"pid": os.getpid(), "host": socket.gethostname(), "heartbeat": now},
            )

    def stopped(self, queries: list[str]) -> None:
        for query in queries:
            (self.path / RUNNING_DIR / f"{query}.json").unlink(missing_ok=True)

    def running(self) -> dict[str, dict[str, Any]]:
        """Queries whose process beat within the last ``STALE_SECONDS``, and
        still runs, when it ran on this machine."""
        found = {}
        for marker in sorted((self.path / RUNNING_DIR).glob("*.json")):
            try:
                info = json.loads(marker.read_text())
            except (OSError, ValueError):
                continue
            if time.time() - info.get("heartbeat", 0) >= STALE_SECONDS:
                continue
            if info.get("host") == socket.gethostname() and not _alive(info["pid"]):
                continue  # killed (SIGKILL): it could not remove its marker
            found[marker.stem] = info
        return found

    @staticmethod
    def _write_json(path: Path, value: Any) -> None:
        partial = path.with_name(f".{path.name}.tmp")
        partial.write_text(json.dumps(value, indent=1, sort_keys=True))
        partial.replace(path)  # a reader never sees half a file


def last_committed_batch(checkpoint: str | None) -> int | None:
    """The id of the last batch a local checkpoint committed (``commits/<id>``)."""
    if not checkpoint or ("://" in checkpoint and not checkpoint.startswith("file:")):
        return None
    commits = Path(checkpoint.removeprefix("file://")) / "commits"
    ids = [int(p.name) for p in commits.glob("[0-9]*") if p.name.isdigit()]
    return max(ids, default=None)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def batch_record(
    query: str,
    report: dict[str, Any],
    counts: dict[str, int],
    expectations: dict[str, int] | None = None,
) -> dict[str, Any]:
    """The log's record of one progress report."""
    return {
        "query": query,
        "batch": report["batchId"],
        "time": report["timestamp"],
        **{key: counts[key] for key in TOTAL_KEYS[1:]},
        "expectations": expectations or {},
        "watermark": report.get("eventTime", {}).get("watermark"),
        "duration_ms": report.get("batchDuration", 0),
        # Spark's own split of the batch's time: getting offsets, writing the
        # offsets and commit logs, planning, running (addBatch).
        "spark_durations_ms": report.get("durationMs", {}),
        # Rows held in state after the batch: only for a query that keeps state.
        "state_rows": (
            sum(state.get("numRowsTotal", 0) for state in report["stateOperators"])
            if report.get("stateOperators")
            else None
        ),
        # Per stateful operator: its state rows, memory, rows removed...
        "state_operators": [op.as_record() for op in state_operators(report)],
        "sources": [
            {
                "source": source.get("description"),
                "end_offset": source.get("endOffset"),
                "kafka_lag": kafka_lag(source),
            }
            for source in report.get("sources", [])
        ],
    }


# The settings of streaming.yml, each also a `kedro run --params` name.
SETTING_NAMES = (
    "trigger",
    "trigger_interval",
    "metrics_address",
    "metrics_port",
    "metrics_tls_certfile",
    "metrics_tls_keyfile",
    "metrics_tls_client_cafile",
    "metrics_serve_after_failure",
    "kafka_connect_timeout",
    "realtime_planner_warm_up",
    "state_dir",
    "progress_log_max_bytes",
    "spark_ui_port",
    "spark_ui_address",
    "spark_ui_kill_enabled",
)


def streaming_settings(config_loader: Any) -> dict[str, Any]:
    """``streaming.yml`` of the run's environment, and the run's ``--params``
    for each setting it does not set."""
    try:
        settings = dict(config_loader["streaming"])
    except MissingConfigException:
        settings = {}
    runtime = getattr(config_loader, "runtime_params", None) or {}
    for name in SETTING_NAMES:
        if name not in settings and name in runtime:
            settings[name] = runtime[name]
    return settings
