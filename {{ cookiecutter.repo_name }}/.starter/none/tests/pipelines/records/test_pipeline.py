"""The records pipeline as a stream: two micro-batches, every record kept,
the rejected ones in the quarantine too. It runs with the project's own
parameters (conf/base/parameters*.yml): change the schema or the rules there,
and change the records and the expected rows here with them."""

import json

from {{ cookiecutter.python_package }}.pipelines.records.pipeline import create_pipeline


def reading(**fields) -> tuple[str]:
    """One JSON line, as the text file source reads it."""
    return (json.dumps({"device": "d1", "at": "2026-11-26T10:00:00", **fields}),)


def test_records_are_typed_checked_and_none_is_lost(stream_test, project_parameters):
    records = stream_test(
        create_pipeline(),
        streams={"raw_records": "value STRING"},
        static={
            f"params:{name}": project_parameters[name]
            for name in ("record_schema", "record_expectations")
        },
        sinks=["checked_records", "quarantined_records"],
    )
    first = records.step(
        raw_records=[reading(temperature_c=21.5), reading(temperature_c=99)]
    )
    second = records.step(raw_records=[reading(temperature_c="warm"), ("{oops",)])

    checked = first["checked_records"]
    assert [(r.device, r.temperature_c, r.rejection_reason) for r in checked.rows] == [
        ("d1", 21.5, None),
        ("d1", 99.0, "temperature_plausible"),
    ]
    assert checked.expectations == {"temperature_plausible": 1}
    # Sorted, nulls first: the line that is not a record has no device.
    assert [r.rejection_reason for r in second["checked_records"].rows] == [
        "not a valid record",
        "invalid temperature_c",
    ]
    assert second["checked_records"].expectations == {"unparsed": 2}
    # The quarantine: the rejected records, each as checked_records has it.
    assert [
        (r.device, r.temperature_c, r.rejection_reason)
        for step in (first, second)
        for r in step["quarantined_records"].rows
    ] == [
        ("d1", 99.0, "temperature_plausible"),
        (None, None, "not a valid record"),
        ("d1", None, "invalid temperature_c"),
    ]
