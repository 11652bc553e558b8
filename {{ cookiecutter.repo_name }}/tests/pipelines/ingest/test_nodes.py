import base64
import json
from datetime import datetime
from pathlib import Path

import yaml
from kedro.config import OmegaConfigLoader
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from {{ cookiecutter.python_package }}.pipelines.ingest.nodes import (
    SOURCE_COLUMNS,
    TRIP_COLUMNS,
    check_trips,
    parse_trips,
)
from tools.trips import rule_breaking_trips

PROJECT = Path(__file__).parents[3]
# The rules as shipped, read as `kedro run` reads them.
EXPECTATIONS = OmegaConfigLoader(str(PROJECT / "conf"), base_env="base")["parameters"][
    "trip_expectations"
]
GOOD = {
    "VendorID": "2",
    "lpep_pickup_datetime": "2021-01-01 00:15:56",
    "lpep_dropoff_datetime": "2021-01-01T00:19:52Z",
    "store_and_fwd_flag": "N",
    "RatecodeID": "1.0",
    "PULocationID": "43",
    "DOLocationID": "151",
    "passenger_count": "1.0",
    "trip_distance": "1.01",
    "fare_amount": "5.5",
    "extra": "0.5",
    "mta_tax": "0.5",
    "tip_amount": "0",
    "tolls_amount": "0",
    "ehail_fee": None,
    "improvement_surcharge": "0.3",
    "total_amount": "6.8",
    "payment_type": "2",
    "trip_type": "1",
    "congestion_surcharge": None,
}


def raw_frame(spark: SparkSession, *records: dict, corrupt: list | None = None):
    columns = [*TRIP_COLUMNS, "_corrupt_record"]
    rows = [tuple(record.get(c) for c in columns) for record in records]
    rows += [(*[None] * len(TRIP_COLUMNS), line) for line in corrupt or []]
    schema = ", ".join(f"`{c}` STRING" for c in columns)
    return spark.createDataFrame(rows, schema)


def test_parse_types_iso_and_epoch_millis_datetimes(spark):
    epoch = {
        **GOOD,
        "lpep_pickup_datetime": "1609460156000",
        "lpep_dropoff_datetime": "1609460392000",
    }
    parsed = parse_trips(raw_frame(spark, GOOD, epoch)).collect()

    for row in parsed:
        assert row.lpep_pickup_datetime == datetime(2021, 1, 1, 0, 15, 56)
        assert row.lpep_dropoff_datetime == datetime(2021, 1, 1, 0, 19, 52)
        assert (row.RatecodeID, row.passenger_count, row.PULocationID) == (1, 1, 43)
        assert (row.fare_amount, row.total_amount, row.ehail_fee) == (5.5, 6.8, None)
        assert row.problems is None
        assert row.source_file is None


def test_parse_names_every_problem_and_keeps_the_raw_record(spark):
    wrong_types = {
        **GOOD,
        "passenger_count": "two",
        "lpep_pickup_datetime": "yesterday",
    }
    missing = {key: value for key, value in GOOD.items() if key != "fare_amount"}
    parsed = parse_trips(
        raw_frame(spark, wrong_types, missing, corrupt=['{"VendorID": 2, "lpep_']),
    ).collect()

    # A missing field is no parse problem: the expectations say what is required.
    assert [row.problems for row in parsed] == [
        "invalid lpep_pickup_datetime; invalid passenger_count",
        None,
        "not a valid record",
    ]
    assert '"passenger_count":"two"' in parsed[0].raw_payload
    assert parsed[2].raw_payload == '{"VendorID": 2, "lpep_'


def test_each_message_gives_one_row_whatever_it_holds(spark):
    """Kafka values (bytes) and text lines take the same path: one row each."""
    good = json.dumps(GOOD).encode()
    values = [
        good,
        b"not json at all",
        b"\xff\xfe\x00\x81garbage" * 20,
        b"",
        None,
        b"[]",
        b'{"fare_amount": "lots"}',
        b'{"VendorID": 2, "lpep_',
    ]
    messages = spark.createDataFrame(
        [
            (value, "trips", 0, offset, datetime(2024, 3, 1))
            for offset, value in enumerate(values)
        ],
        "value BINARY, topic STRING, partition INT, offset LONG, timestamp TIMESTAMP",
    )
    rows = parse_trips(messages).orderBy("kafka_offset").collect()

    assert [(row.problems, row.raw_payload) for row in rows] == [
        (None, good.decode()),
        ("not a valid record", "not json at all"),
        (
            "not UTF-8 text (raw_payload is base64)",
            base64.b64encode(values[2]).decode(),
        ),
        ("empty record", ""),
        ("empty record", None),
        ("not a valid record", "[]"),
        ("invalid fare_amount", '{"fare_amount": "lots"}'),
        ("not a valid record", '{"VendorID": 2, "lpep_'),
    ]
    assert rows[0].fare_amount == 5.5 and rows[0].lpep_dropoff_datetime == datetime(
        2021, 1, 1, 0, 19, 52
    )
    assert [(row.kafka_topic, row.kafka_offset) for row in rows] == [
        ("trips", n) for n in range(8)
    ]

    lines = spark.createDataFrame([(good.decode(),), ("   ",)], "value STRING")
    assert [row.problems for row in parse_trips(lines).collect()] == [
        None,
        "empty record",
    ]


def zone_table(spark: SparkSession, *ids: int):
    return spark.createDataFrame(
        [(i, "Manhattan") for i in ids], "LocationID INT, Borough STRING"
    )


def as_text(record: dict) -> dict:
    return {k: None if v is None else str(v) for k, v in record.items()}


def test_check_applies_every_shipped_rule_and_loses_nothing(spark):
    """tools.trips' rule breakers, each with exactly the rules it breaks."""
    breakers = rule_breaking_trips()
    zones = zone_table(spark, *range(1, 266))
    checked = check_trips(
        parse_trips(raw_frame(spark, *[as_text(r) for r in breakers])),
        zones,
        EXPECTATIONS,
    )

    assert checked.columns == [
        *TRIP_COLUMNS,
        "rejection_reason",
        "warnings",
        "raw_payload",
        *SOURCE_COLUMNS,
    ]
    rows = checked.collect()
    got = [(row.rejection_reason, row.warnings) for row in rows]
    assert got == [
        ("pickup_time_present", None),
        ("dropoff_time_present", None),
        ("pickup_location_present", None),
        ("dropoff_location_present", None),
        ("fare_amount_present", None),
        ("total_amount_present", None),
        ("vendor_code", None),
        ("ratecode", None),
        ("payment_type_code", None),
        ("trip_type_code", None),
        ("store_and_fwd_flag_code", None),
        ("pickup_location_known", None),
        ("dropoff_location_known", None),
        ("pickup_time_in_window", None),
        ("dropoff_time_in_window", None),
        ("dropoff_after_pickup", None),
        ("trip_duration", None),
        ("passenger_count_range", None),
        (None, "passengers_recorded"),
        ("trip_distance_range", None),
        ("trip_speed", None),
        ("fare_amount_range", None),
        ("fare_amount_range; total_amount_range", None),
        ("extra_range", None),
        ("mta_tax_range", None),
        ("tip_amount_range", None),
        ("tolls_amount_range", None),
        ("ehail_fee_range", None),
        ("improvement_surcharge_range", None),
        ("congestion_surcharge_range", None),
        ("total_covers_fare", None),
        ("store_and_fwd_flag_code; record_size", None),
    ]
    named = {n for reason, warning in got for n in f"{reason}; {warning}".split("; ")}
    assert set(EXPECTATIONS) <= named, set(EXPECTATIONS) - named
    # Only rejected trips keep their payload: valid ones are the typed fields.
    assert all(bool(row.raw_payload) == bool(row.rejection_reason) for row in rows)


def test_check_of_the_example_good_trip_and_parse_problems(spark):
    zones = zone_table(spark, 43, 151)
    records = [GOOD, {**GOOD, "passenger_count": "two"}, {**GOOD, "VendorID": None}]
    rows = check_trips(
        parse_trips(raw_frame(spark, *records)), zones, EXPECTATIONS
    ).collect()
    # Datetimes of 2021 are within the shipped window; a null code breaks no rule.
    assert [(r.rejection_reason, r.warnings) for r in rows] == [
        (None, None),
        ("invalid passenger_count", None),  # not checked against the rules
        (None, None),
    ]


def test_check_ignores_duplicate_zone_ids(spark):
    zones = spark.createDataFrame(
        [(43, "Manhattan"), (151, "Manhattan"), (43, "Manhattan")],
        "LocationID INT, Borough STRING",
    )
    checked = check_trips(parse_trips(raw_frame(spark, GOOD)), zones, EXPECTATIONS)
    assert [row.rejection_reason for row in checked.collect()] == [None]


def test_parse_accepts_typed_columns_as_in_tlc_parquet_files(spark):
    typed = spark.createDataFrame(
        [
            (
                datetime(2021, 1, 1, 0, 15, 56),
                datetime(2021, 1, 1, 0, 19, 52),
                1.0,
                43,
                5.5,
            )
        ],
        "lpep_pickup_datetime TIMESTAMP, lpep_dropoff_datetime TIMESTAMP,"
        " passenger_count DOUBLE, PULocationID BIGINT, fare_amount DOUBLE",
    )
    for name in TRIP_COLUMNS:
        if name not in typed.columns:
            typed = typed.withColumn(name, F.lit(None).cast("string"))

    row = parse_trips(typed).first()

    assert row.lpep_pickup_datetime == datetime(2021, 1, 1, 0, 15, 56)
    assert (row.passenger_count, row.PULocationID, row.fare_amount) == (1, 43, 5.5)
    assert row.problems is None


# HotSpot does not JIT-compile a method of more bytecode than this.
JIT_METHOD_LIMIT = 8000


def _steps(plan) -> list:
    """Every step of a Spark plan (a JVM object), the plan itself first."""
    children = plan.children()
    return [plan] + [
        step for i in range(children.size()) for step in _steps(children.apply(i))
    ]


def _text(step) -> str:
    """A step's own expressions, as Spark prints them (not its children's)."""
    return step.expressions().toString()


def _common_subexpressions(spark: SparkSession, step) -> list:
    """The expressions repeated in a step that Spark computes once per row, by
    its own grouping (the one its generated code for the step uses)."""
    setting = "spark.sql.subexpressionElimination"
    assert spark.conf.get(f"{setting}.enabled") == "true"
    common = spark._jvm.org.apache.spark.sql.catalyst.expressions.EquivalentExpressions(
        spark.conf.get(f"{setting}.skipForShortcutExpr") == "true"
    )
    # Scala's default argument: the grouping's own map.
    groups = getattr(common, "addExprTree$default$2")()
    expressions = step.expressions()
    for i in range(expressions.size()):
        common.addExprTree(expressions.apply(i), groups)
    found = common.getCommonSubexpressions()
    return [found.apply(i) for i in range(found.size())]


def test_ingest_plan_decodes_each_record_once_in_compiled_code(spark, tmp_path):
    """Guards what once made ingest ten times slower than plain Spark.

    Each record is decoded once (a second, lenient decoding runs only for a
    record that does not fit the field types), each rule is evaluated once
    per record, the zone lookup needs no
    shuffle stage in every micro-batch, and no generated method is
    left to the JVM's interpreter: it is small enough for the JIT's default
    limit, or every environment's spark.yml lifts that limit on the driver
    and the executors (and the method stays within Spark's own, which keeps
    the stage whole).
    """
    zones = spark.createDataFrame(
        [(43, "Manhattan"), (151, "Manhattan")], "LocationID INT, Borough STRING"
    )
    # A file, not a local DataFrame, which Spark would evaluate while planning.
    (tmp_path / "trips.json").write_text(json.dumps(GOOD) + "\n")
    lines = spark.read.text(str(tmp_path))
    checked = check_trips(parse_trips(lines), zones, EXPECTATIONS)

    executed = checked._jdf.queryExecution().executedPlan()
    # The whole plan: by default Spark prints 25 fields of a list, then "...".
    spark.conf.set("spark.sql.debug.maxToStringFields", 10_000)
    try:
        plan = checked._jdf.queryExecution().optimizedPlan().toString()
        # One step of the plan decodes. from_json has no generated code of its
        # own, so a step holding it runs outside whole-stage code generation
        # and writes out every row it makes.
        (step,) = [s for s in _steps(executed) if "from_json(" in _text(s)]
        # The typed decode may be written more than once in that step, but
        # Spark computes it once per record, as a common subexpression.
        (typed,) = [
            e.toString()
            for e in _common_subexpressions(spark, step)
            if e.prettyName() == "from_json"
        ]
        # The lenient decode runs only for a record that does not fit.
        rest = _text(step).replace(typed, "")
        assert rest.count("from_json(") == rest.count("THEN from_json(") == 1
    finally:
        spark.conf.unset("spark.sql.debug.maxToStringFields")
    # Each rule's condition is computed once per record, into a column that
    # the reasons and the counts read, not copied into each of them.
    for index in range(len(EXPECTATIONS)):
        assert plan.count(f" AS _broken_{index}#") == 1, index

    # The zone lookup is read for every micro-batch: deduplicated without a shuffle.
    assert "Exchange hashpartitioning" not in executed.toString()
    stages = spark._jvm.org.apache.spark.sql.execution.debug.package.codegenStringSeq(
        executed
    )
    largest = max(
        stages.apply(i)._3().maxMethodCodeSize() for i in range(stages.size())
    )
    # Every environment's settings: conf/base/spark.yml, and each one over it.
    conf = Path(__file__).parents[3] / "conf"
    base = yaml.safe_load((conf / "base/spark.yml").read_text())
    environments = [base] + [
        {**base, **yaml.safe_load(path.read_text())}
        for path in conf.glob("*/spark.yml")
        if path.parent.name != "base"
    ]
    jit_compiles_all = all(
        "-XX:-DontCompileHugeMethods"
        in settings.get(f"spark.{role}.extraJavaOptions", "")
        for settings in environments
        for role in ("driver", "executor")
    )
    whole_stage_limit = min(
        int(settings.get("spark.sql.codegen.hugeMethodLimit", 65535))
        for settings in environments
    )
    assert largest <= JIT_METHOD_LIMIT or (
        jit_compiles_all and largest <= whole_stage_limit
    )


def test_ingest_query_is_compiled_once_not_per_micro_batch(spark, tmp_path):
    """Guards the per-batch cost that made continuous runs lag behind Kafka.

    Spark caches generated code by its text, so a query whose code is the
    same in every micro-batch is compiled once. A value that changes per
    batch and is written into the code (``current_timestamp()`` is one) makes
    Spark compile the whole query again for every micro-batch.
    """
    zones = spark.createDataFrame(
        [(43, "Manhattan"), (151, "Manhattan")], "LocationID INT, Borough STRING"
    )
    codegen = spark._jvm.org.apache.spark.metrics.source.CodegenMetrics

    def run_bronze_query(files: int, name: str) -> int:
        landing = tmp_path / name / "landing"
        landing.mkdir(parents=True)
        for number in range(files):
            (landing / f"{number}.json").write_text(json.dumps(GOOD) + "\n")
        lines = (
            spark.readStream.format("text")
            .option("maxFilesPerTrigger", 1)
            .load(str(landing))
        )
        query = (
            check_trips(parse_trips(lines), zones, EXPECTATIONS)
            .writeStream.format("parquet")
            .option("path", str(tmp_path / name / "bronze"))
            .option("checkpointLocation", str(tmp_path / name / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        return sum(report["numInputRows"] > 0 for report in query.recentProgress)

    run_bronze_query(1, "first")  # compiles the query's code
    compiled = codegen.METRIC_COMPILATION_TIME().getCount()
    assert run_bronze_query(3, "again") == 3
    assert codegen.METRIC_COMPILATION_TIME().getCount() == compiled
