"""The stream harness itself: what the pipelines' stream tests rely on."""

from datetime import datetime, timedelta

import pandas as pd
import pytest
from pyspark.sql import DataFrame


def count_per_key(events: DataFrame) -> DataFrame:
    return events.groupBy("key").count()


def test_complete_mode_gives_the_whole_table_and_names_are_checked(stream_test):
    with pytest.raises(ValueError, match=r"No value for inputs \['events'\]"):
        stream_test(count_per_key, streams={})
    counts = stream_test(
        count_per_key, streams={"events": "key STRING"}, output_mode="complete"
    )
    with pytest.raises(ValueError, match=r"\['other'\] are not streaming inputs"):
        counts.step(other=[("a",)])

    first = counts.step(events=pd.DataFrame({"key": ["a", "b", "a"]}))
    idle = counts.step()  # nothing new: no micro-batch, nothing written
    second = counts.step(events=[{"key": "b"}, {"key": None}])

    assert (first.rows, first.input_rows) == ([("a", 2), ("b", 1)], 3)
    assert (idle.rows, idle.batches, idle.input_rows) == ([], [], 0)
    assert (second.rows, second.input_rows) == ([(None, 1), ("a", 2), ("b", 2)], 2)
    assert second.state_rows == 3


def unique_events(events: DataFrame) -> DataFrame:
    return events.withWatermark("at", "10 minutes").dropDuplicatesWithinWatermark(
        ["id"]
    )


def at(minute: int) -> datetime:
    return datetime(2024, 3, 1, 10) + timedelta(minutes=minute)


def test_each_stateful_operator_shows_its_state_and_what_a_step_removed(stream_test):
    dedupe = stream_test(unique_events, streams={"events": "id STRING, at TIMESTAMP"})
    # a twice in one batch, as a replayed message; then again in the next.
    first = dedupe.step(events=[("a", at(0)), ("a", at(0)), ("b", at(2))])
    # c moves the watermark to 10:20, past a's and b's 10 minutes: both go.
    second = dedupe.step(events=[("a", at(0)), ("c", at(30))])
    # a once more, now behind the watermark: dropped as late, not emitted.
    third = dedupe.step(events=[("a", at(0))])

    assert [s.rows for s in (first, second, third)] == [
        [("a", at(0)), ("b", at(2))],
        [("c", at(30))],
        [],
    ]
    figures = [
        [
            (op.name, op.rows, op.rows_removed, op.late_rows_dropped)
            for op in s.operators
        ]
        for s in (first, second, third)
    ]
    assert figures == [
        [("dedupeWithinWatermark", 2, 0, 0)],
        [("dedupeWithinWatermark", 1, 2, 0)],
        [("dedupeWithinWatermark", 1, 0, 1)],
    ]
    # Not transformWithState: no timers, no time to live.
    assert {(op.timers_set, op.ttl_values_removed) for op in third.operators} == {
        (None, None)
    }
    assert (
        third.operators[0].memory_bytes
        == (third.progress[-1]["stateOperators"][0]["memoryUsedBytes"])
    )


@pytest.mark.parametrize(
    "replay", [pytest.param(True, id="replayed"), pytest.param(False, id="committed")]
)
def test_a_restart_resumes_from_the_checkpoint(stream_test, replay):
    counts = stream_test(
        count_per_key, streams={"events": "key STRING"}, output_mode="complete"
    )
    counts.step(events=[("a",)])
    last = counts.step(events=[("a",), ("b",)])
    counts.restart(replay_last_batch=replay)
    after = counts.step()

    if replay:  # the same batch, input and result again
        assert (after.rows, after.input_rows) == ([("a", 2), ("b", 1)], 2)
        assert after.progress[-1]["batchId"] == last.progress[-1]["batchId"]
    else:  # nothing new to run
        assert (after.rows, after.batches, after.input_rows) == ([], [], 0)
