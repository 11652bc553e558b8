"""The ingest pipeline as a stream: each micro-batch's expectation counts."""

import json
from collections import Counter

from {{ cookiecutter.python_package }}.pipelines.ingest.pipeline import create_pipeline
from tools.trips import rule_breaking_trips

from .test_nodes import EXPECTATIONS, GOOD, zone_table


def test_each_micro_batch_counts_what_each_rule_caught_and_loses_no_line(
    stream_test, spark
):
    ingest = stream_test(
        create_pipeline(),
        streams={"raw_trips": "value STRING"},  # lines, as the text source reads them
        static={
            "taxi_zones": zone_table(spark, *range(1, 266)),
            "params:trip_expectations": EXPECTATIONS,
        },
    )
    breakers = [(json.dumps(trip, default=str),) for trip in rule_breaking_trips()]

    first = ingest.step(raw_trips=breakers)["bronze_trips"]
    second = ingest.step(raw_trips=[(json.dumps(GOOD),), ("{not json",)])[
        "bronze_trips"
    ]

    assert (first.input_rows, len(first.rows)) == (len(breakers), len(breakers))
    named = Counter(
        name
        for row in first.rows
        for names in (row.rejection_reason, row.warnings)
        if names
        for name in names.split("; ")
    )
    assert first.expectations == named
    assert set(named) == set(EXPECTATIONS)
    # Rows come sorted, nulls first: the line that did not parse has no fields.
    assert [row.rejection_reason for row in second.rows] == [
        "not a valid record",
        None,
    ]
    assert second.expectations == {"unparsed": 1}
