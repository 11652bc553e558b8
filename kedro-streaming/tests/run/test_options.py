import pytest
from kedro.io import DataCatalog
from kedro.pipeline import node, pipeline
from kedro_streaming._checks.catalog import fan_out
from kedro_streaming._connectors.options import (
    OptionNames,
    interval_problem,
    option_problems,
    value_problem,
)
from kedro_streaming._connectors.registry import connector_for


def test_file_and_rate_options_are_those_of_the_running_spark(spark):
    names = OptionNames(spark)
    problems = option_problems(
        names,
        connector_for("csv"),
        "source",
        {
            "header": "true",
            "maxFilesPerTrigger": 2,
            "latestFirst": "yes",
            "sep": ";",
            "seperator": ";",
            "maxFilesPerTriger": 1,
            "MULTILINE": "false",  # Spark's options are case-insensitive
        },
        args_name="load_args",
        spark_version=spark.version,
    )
    assert problems == [
        "`latestFirst: yes` in its load_args: use true or false",
        f"`seperator` in its load_args is not a csv source option of Spark "
        f"{spark.version}",
        f"`maxFilesPerTriger` in its load_args is not a csv source option of Spark "
        f"{spark.version}: did you mean `maxFilesPerTrigger`?",
    ]
    # A file sink takes its format's options, not the file source's.
    assert option_problems(
        names,
        connector_for("parquet"),
        "sink",
        {"compression": "zstd", "maxFilesPerTrigger": 1},
        args_name="save_args",
        spark_version="4",
    ) == [
        "`maxFilesPerTrigger` in its save_args is not a parquet sink option of Spark 4"
    ]
    assert option_problems(
        names,
        connector_for("rate"),
        "source",
        {"rowsPerSecond": 0, "rowsPerSec": 5},
        args_name="load_args",
        spark_version="4",
    ) == [
        "`rowsPerSecond: 0` in its load_args: use a whole number above 0",
        "`rowsPerSec` in its load_args is not a rate source option of Spark 4: did "
        "you mean `rowsPerSecond`?",
    ]
    # Formats the runtime does not know the options of are left to Spark.
    assert names.known(connector_for("socket"), "source") is None


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        ("startingOffsets", "earliest", None),
        ("startingOffsets", "LATEST", None),
        ("startingOffsets", '{"trips": {"0": 42}}', None),
        (
            "startingOffsets",
            "beginning",
            "use earliest (read what the topic holds), latest (only what comes "
            "from now on), or per-partition offsets as JSON",
        ),
        (
            "startingOffsets",
            '{"trips": {"0": 42}',
            "not valid JSON: give the offsets per topic and partition, e.g. "
            '{"trips": {"0": 42}}, or earliest, or latest',
        ),
        ("failOnDataLoss", True, None),
        ("failOnDataLoss", "flase", "use true or false"),
        ("maxOffsetsPerTrigger", "10000", None),
        ("maxOffsetsPerTrigger", "-1", "use a whole number above 0"),
        ("cleanSource", "archive", None),
        ("cleanSource", "move", "use one of archive, delete, off"),
        ("mode", "failfast", None),
        ("mode", "STRICT", "use one of PERMISSIVE, DROPMALFORMED, FAILFAST"),
        ("subscribe", "anything", None),
    ],
)
def test_values_with_a_fixed_vocabulary(key, value, problem):
    assert value_problem(key, value) == problem


def test_trigger_intervals_are_read_as_spark_reads_them(spark):
    assert interval_problem(spark, "10 seconds") is None
    assert interval_problem(spark, "500 milliseconds") is None
    assert interval_problem(spark, "ten seconds") == (
        "'ten seconds' is not an interval Spark reads: write e.g. '10 seconds', "
        "'500 milliseconds' or '1 minute'"
    )


def test_fan_out_names_the_queries_and_what_each_repeats(tmp_path):
    def sink(name):
        return {
            "type": "kedro_streaming.SparkStreamingDataset",
            "filepath": str(tmp_path / name),
            "file_format": "parquet",
            "save_args": {"checkpoint": str(tmp_path / "checkpoints" / name)},
        }

    catalog = DataCatalog.from_config(
        {
            "raw": {
                "type": "kedro_streaming.SparkStreamingDataset",
                "file_format": "rate",
            },
            "valid": sink("valid"),
            "rejected": sink("rejected"),
            "summary": sink("summary"),
        }
    )
    nodes = pipeline(
        [
            node(lambda r: r, "raw", "parsed", name="parse"),
            node(lambda p: p, "parsed", "checked", name="check"),
            node(lambda c: c, "checked", "valid", name="keep_valid"),
            node(lambda c: c, "checked", "rejected", name="keep_rejected"),
            # Written once and read back: a stream of its own, no fan-out.
            node(lambda v: v, "valid", "summary", name="summarise"),
        ]
    )
    assert fan_out(catalog, nodes, ["rejected", "summary", "valid"]) == [
        "queries rejected, valid each read raw and run parse, check on their "
        "own: 2 reads of the source and checks of every record. To read and "
        "check once, write the shared output to a sink and read that sink "
        '(docs/operating.md, "One source, several sinks")'
    ]
