"""parse_records: any record stream typed by a schema, every problem named."""

import json
from datetime import datetime

import pytest
from kedro_streaming import StreamingConfigError, check_expectations, parse_records
from pyspark.errors import PySparkException
from pyspark.sql import functions as F

READING = "device STRING NOT NULL, at TIMESTAMP, temperature_c DOUBLE, ok BOOLEAN"
READING_FIELDS = ["device", "at", "temperature_c", "ok"]
PROVENANCE = [
    "source_file",
    "kafka_topic",
    "kafka_partition",
    "kafka_offset",
    "kafka_timestamp",
]


def lines(spark, *values):
    """Text lines, as a text file source gives them."""
    return spark.createDataFrame([(value,) for value in values], "value STRING")


def fields_and_problems(frame, fields=READING_FIELDS):
    return [(*[row[name] for name in fields], row.problems) for row in frame.collect()]


def test_json_lines_are_typed_and_each_problem_named_per_field(spark):
    good = {"device": "d1", "at": "2026-11-26T10:00:00", "temperature_c": 21.5}
    parsed = parse_records(
        lines(
            spark,
            json.dumps({**good, "ok": True}),
            # Epoch milliseconds, an integer as a float, text padded: all typed.
            json.dumps({"device": " d2 ", "at": 1795687200000, "temperature_c": 20}),
            json.dumps({**good, "temperature_c": "warm", "at": "yesterday"}),
            json.dumps({"at": "2026-11-26T10:00:00", "temperature_c": 1.0}),
            '["not", "an", "object"]',
            "",
        ),
        READING,
    )

    assert parsed.columns == [*READING_FIELDS, "raw_payload", "problems", *PROVENANCE]
    assert fields_and_problems(parsed) == [
        ("d1", datetime(2026, 11, 26, 10), 21.5, True, None),
        ("d2", datetime(2026, 11, 26, 10), 20.0, None, None),
        ("d1", None, None, None, "invalid at; invalid temperature_c"),
        (None, datetime(2026, 11, 26, 10), 1.0, None, "missing device"),
        (None, None, None, None, "not a valid record"),
        (None, None, None, None, "empty record"),
    ]
    assert parsed.collect()[2].raw_payload == json.dumps(
        {**good, "temperature_c": "warm", "at": "yesterday"}
    )

    # Blank text is no value: missing where required, else null.
    blank = parse_records(
        lines(
            spark,
            json.dumps({"device": "", "room": ""}),
            json.dumps({"device": "d3", "room": "  "}),
            json.dumps({"device": " ", "room": "lab"}),
        ),
        "device STRING NOT NULL, room STRING",
    )
    assert fields_and_problems(blank, ["device", "room"]) == [
        (None, None, "missing device"),
        ("d3", None, None),
        (None, "lab", "missing device"),
    ]


def test_a_json_line_is_decoded_once_in_one_step_of_the_plan(spark, tmp_path):
    """from_json has no generated code of its own (a CodegenFallback), so each
    step of the plan holding it runs outside whole-stage code generation and
    writes out every row it makes: one such step, in which the typed decode is
    computed once per row (one of Spark's common subexpressions of the step),
    and the decode as text only for a record that does not fit."""
    # A file, not local rows, which Spark would evaluate while planning.
    (tmp_path / "readings.json").write_text(json.dumps({"device": "d1"}) + "\n")
    parsed = parse_records(spark.read.text(str(tmp_path)), READING)
    executed = parsed._jdf.queryExecution().executedPlan()

    steps, todo = [], [executed]
    while todo:
        step = todo.pop()
        children = step.children()
        todo += [children.apply(i) for i in range(children.size())]
        text = step.expressions().toString()
        if "from_json(" in text:
            steps.append((step, text))
    ((step, text),) = steps
    assert step.nodeName() == "Project"
    common = spark._jvm.org.apache.spark.sql.catalyst.expressions.EquivalentExpressions(
        False
    )
    groups = getattr(common, "addExprTree$default$2")()  # Scala's default argument
    for i in range(step.expressions().size()):
        common.addExprTree(step.expressions().apply(i), groups)
    found = common.getCommonSubexpressions()
    (typed,) = [
        found.apply(i).toString()
        for i in range(found.size())
        if found.apply(i).prettyName() == "from_json"
    ]
    assert "DoubleType" in typed
    rest = text.replace(typed, "")
    assert rest.count("from_json(") == rest.count("THEN from_json(") == 1
    assert [(row.device, row.problems) for row in parsed.collect()] == [("d1", None)]


def test_a_schema_that_does_not_fit_names_the_field_in_every_record(spark):
    """`temperature_c INT` for readings like 21.5: each record is quarantined
    for that field, not as "not a valid record"; whole numbers still fit."""
    parsed = parse_records(
        lines(
            spark,
            '{"device": "d1", "temperature_c": 21.5}',
            '{"device": "d2", "temperature_c": 21}',
        ),
        "device STRING, temperature_c INT",
    )
    assert fields_and_problems(parsed, ["device", "temperature_c"]) == [
        ("d1", None, "invalid temperature_c"),
        ("d2", 21, None),
    ]


def test_kafka_values_keep_their_provenance_and_bytes_that_are_not_text(spark):
    messages = spark.createDataFrame(
        [
            (b'{"id": 9007199254740993, "tags": ["a", "b"]}', "readings", 0, 7),
            (b"\xff\xfe", "readings", 1, 3),
            (None, "readings", 1, 4),
        ],
        "value BINARY, topic STRING, partition INT, offset LONG",
    ).selectExpr("*", "TIMESTAMP'2026-11-26 10:00:00' AS timestamp")
    parsed = parse_records(messages, "id BIGINT, tags ARRAY<STRING>")

    rows = parsed.collect()
    # A long beyond a double's precision stays exact.
    assert [(r.id, r.tags, r.problems) for r in rows] == [
        (9007199254740993, ["a", "b"], None),
        (None, None, "not UTF-8 text (raw_payload is base64)"),
        (None, None, "empty record"),
    ]
    assert [(r.kafka_topic, r.kafka_partition, r.kafka_offset) for r in rows] == [
        ("readings", 0, 7),
        ("readings", 1, 3),
        ("readings", 1, 4),
    ]
    assert rows[1].raw_payload == "//4="
    assert {r.source_file for r in rows} == {None}


def test_csv_columns_are_typed_and_a_corrupt_line_named(spark):
    rows = spark.createDataFrame(
        [("d1", "2.0", None), ("d2", "x", None), (None, None, "d3;;;")],
        "device STRING, count STRING, _corrupt_record STRING",
    )
    parsed = parse_records(rows, "device STRING, count INT")
    assert fields_and_problems(parsed, ["device", "count"]) == [
        ("d1", 2, None),
        ("d2", None, "invalid count"),
        (None, None, "not a valid record"),
    ]
    assert [r.raw_payload for r in parsed.collect()] == [
        '{"device":"d1","count":"2.0"}',
        '{"device":"d2","count":"x"}',
        "d3;;;",
    ]


ODD_NAMES = "`it's a\\b` STRING NOT NULL, `x``y` INT, at STRUCT<`sensor id`: STRING>"


def test_any_field_name_a_schema_can_quote_is_read(spark):
    """Names with a space, a quote, a backslash or a backtick, at the top or
    nested: JSON lines and CSV columns typed by them."""
    record = {"it's a\\b": "d1", "x`y": 2, "at": {"sensor id": "s1"}}
    parsed = parse_records(lines(spark, json.dumps(record), '{"x`y": "z"}'), ODD_NAMES)
    names = ["it's a\\b", "x`y", "at"]
    assert [(*[row[n] for n in names], row.problems) for row in parsed.collect()] == [
        ("d1", 2, ("s1",), None),
        (None, None, None, "missing it's a\\b; invalid x`y"),
    ]
    columns = spark.createDataFrame(
        [("d2", "3", '{"sensor id": "s2"}')],
        "`it's a\\b` STRING, `x``y` STRING, at STRING",
    )
    (row,) = parse_records(columns, ODD_NAMES).collect()
    assert ([row[n] for n in names], row.problems) == (["d2", 3, ("s2",)], None)


def test_bad_input_or_schema_is_refused_before_anything_runs(spark):
    with pytest.raises(ValueError, match="neither a `value` column.*count"):
        parse_records(spark.createDataFrame([("d1",)], "device STRING"), "count INT")
    with pytest.raises(ValueError, match="DDL text or a StructType"):
        parse_records(lines(spark, "{}"), {"device": "string"})
    with pytest.raises(StreamingConfigError) as error:
        parse_records(lines(spark, "{}"), "device STRNG, at DATETIME")
    assert str(error.value).startswith(
        "The record schema 'device STRNG, at DATETIME' is not Spark SQL DDL: "
        '[UNSUPPORTED_DATATYPE] Unsupported data type "STRNG".'
    )
    assert "conf/base/parameters.yml" in str(error.value)


def test_expectations_on_parsed_records_name_where_a_failing_record_came_from(spark):
    """check_expectations needs no origin: the provenance columns and raw
    payload of parse_records are its default."""
    parsed = parse_records(
        lines(spark, '{"device": "d1", "temperature_c": 99}'),
        "device STRING, temperature_c DOUBLE",
    ).withColumn("source_file", F.lit("readings-1.json"))
    rules = {"plausible": {"expect": "temperature_c < 60", "action": "fail"}}
    with pytest.raises(PySparkException) as failure:
        check_expectations(parsed, rules, problems="problems").collect()
    assert (
        "Expectation 'plausible' failed (action: fail) on file readings-1.json, "
        'record {"device": "d1", "temperature_c": 99}'
    ) in str(failure.value)


@pytest.mark.parametrize(
    ("problems", "reasons"),
    [
        pytest.param(
            {}, [None, "invalid temperature_c", "not a valid record"], id="default"
        ),
        pytest.param(
            {"problems": None}, [None, None, "known_device"], id="none-read-by-choice"
        ),
    ],
)
def test_records_that_did_not_parse_are_quarantined_by_default(
    spark, problems, reasons
):
    """parse_records' column of problems is check_expectations' by default:
    a record that did not parse is never passed as valid for want of an
    argument."""
    parsed = parse_records(
        lines(
            spark, '{"device": "d1"}', '{"device": "d2", "temperature_c": "hot"}', "x"
        ),
        "device STRING, temperature_c DOUBLE",
    )
    rules = {"known_device": {"expect": "device IS NOT NULL", "action": "quarantine"}}
    checked = check_expectations(parsed, rules, **problems)
    assert [row.rejection_reason for row in checked.collect()] == reasons


def test_a_column_of_problems_the_records_lack_is_named(spark):
    readings = spark.createDataFrame([("d1",)], "device STRING")
    rules = {"known_device": {"expect": "device IS NOT NULL", "action": "quarantine"}}
    with pytest.raises(StreamingConfigError, match="'parse_problems' is not a column"):
        check_expectations(readings, rules, problems="parse_problems")
    # The default only where the records have it: these were not parsed.
    assert check_expectations(readings, rules).count() == 1
