"""The stream harness itself: what the pipelines' stream tests rely on."""

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
