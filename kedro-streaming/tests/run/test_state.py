import json
import os
import time

import pytest
from kedro_streaming._run.state import STALE_SECONDS, StreamState
from kedro_streaming.errors import StreamingConfigError


def record(query: str, batch: int, rows: int = 10, **expectations: int) -> dict:
    return {
        "expectations": expectations,
        "query": query,
        "batch": batch,
        "time": f"2024-03-01T00:00:{batch:02d}Z",
        "input_rows": rows,
        "rows_written": rows,
        "quarantined": 1,
        "late_state_rows_dropped": 0,
    }


def test_progress_log_is_bounded_and_totals_outlive_its_rotation(tmp_path):
    state = StreamState(str(tmp_path), max_bytes=1000)
    for batch in range(40):
        state.append(record("bronze", batch, unparsed=1, trip_speed=batch % 2))
    state.append(record("summary", 0, rows=3))

    sizes = [path.stat().st_size for path in state.progress_files]
    assert len(sizes) == 2 and all(size <= 1000 + 300 for size in sizes)
    kept = state.records()
    assert kept[-1]["query"] == "summary"
    batches = [r["batch"] for r in kept if r["query"] == "bronze"]
    assert batches == list(range(batches[0], 40))  # the newest, in order
    assert state.totals()["bronze"] == {
        "batches": 40,
        "input_rows": 400,
        "rows_written": 400,
        "quarantined": 40,
        "late_state_rows_dropped": 0,
        "expectations": {"unparsed": 40, "trip_speed": 20},
        "last_batch": 39,
        "last_time": "2024-03-01T00:00:39Z",
    }

    assert "expectations" not in state.totals()["summary"]

    state.forget({"bronze"})
    assert set(state.totals()) == {"summary"}


def test_running_queries_are_those_with_a_recent_heartbeat(tmp_path):
    state = StreamState(str(tmp_path))
    assert state.running() == {}
    state.heartbeat(["bronze", "summary"])
    assert set(state.running()) == {"bronze", "summary"}
    assert state.running()["bronze"]["pid"] == os.getpid()

    # A process killed with SIGKILL leaves its marker, which goes stale.
    marker = tmp_path / "running" / "summary.json"
    info = json.loads(marker.read_text())
    marker.write_text(
        json.dumps({**info, "heartbeat": time.time() - STALE_SECONDS - 1})
    )
    assert set(state.running()) == {"bronze"}

    # On this machine, a marker whose process is gone does not count either.
    marker = tmp_path / "running" / "bronze.json"
    marker.write_text(json.dumps({**info, "pid": 2**22 + 1}))  # above pid_max
    assert state.running() == {}
    state.heartbeat(["bronze"], force=True)
    state.stopped(["bronze"])
    assert state.running() == {}


def test_state_dir_must_be_a_local_folder():
    with pytest.raises(StreamingConfigError, match="local or mounted path"):
        StreamState("s3a://bucket/streams")
