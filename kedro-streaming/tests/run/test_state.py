import json
import os
import time

import pytest
from kedro.io import DataCatalog
from kedro.pipeline import Pipeline, node
from kedro_streaming._checks.spec import RunSpec
from kedro_streaming._cli.sinks import _described_totals
from kedro_streaming._observe.state import STALE_SECONDS, StreamState
from kedro_streaming._run.supervisor import QuerySupervisor
from kedro_streaming.errors import StreamingConfigError

from tests.helpers import SOURCE, sink


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


def test_batches_a_killed_run_committed_but_never_logged_are_counted_as_such(
    spark, tmp_path, caplog
):
    """Killed between a batch's commit and its record, a run leaves a batch
    the totals never saw: the next start says so, and the totals count it."""
    landing = tmp_path / "landing"
    landing.mkdir()
    catalog = DataCatalog.from_config(
        {
            "landing": {**SOURCE, "filepath": str(landing)},
            "copied": sink(
                str(tmp_path / "copied"), checkpoint=str(tmp_path / "checkpoint")
            ),
        }
    )
    pipeline = Pipeline([node(lambda frame: frame, "landing", "copied", name="copy")])
    state = StreamState(str(tmp_path / "state"))

    def run(ids: list[int], supervised: bool = True) -> None:
        (landing / f"{ids[0]}.json").write_text(
            "".join(f'{{"id": {i}}}\n' for i in ids)
        )
        trigger = {"availableNow": True}
        if not supervised:  # the batch commits; its record is never written
            catalog["copied"].start(
                catalog["landing"].load(), trigger=trigger
            ).awaitTermination()
            return
        settings = {"trigger": "available_now", "state_dir": str(state.path)}
        supervisor = QuerySupervisor(RunSpec.read(catalog, pipeline, settings))
        supervisor.start("copied", catalog["landing"].load())
        supervisor.run_to_the_end()
        supervisor.end()

    run([1, 2])
    run([3], supervised=False)
    run([4, 5, 6, 7])
    run([8])

    assert caplog.text.count("committed by an earlier run") == 1
    assert (
        "Query copied: batch 1 was committed by an earlier run that ended before "
        "it logged it (killed): not in the query's totals of rows, which count it "
        "as unlogged." in caplog.text
    )
    totals = state.totals()["copied"]
    assert [totals[k] for k in ("batches", "rows_written", "last_batch")] == [
        3,
        7,
        3,
    ]
    assert totals["unlogged_batches"] == 1
    assert _described_totals(totals) == [
        "7 rows written in 3 batches, and 1 batch committed but not logged (a "
        "run killed before it logged it: its rows are not counted)"
    ]
