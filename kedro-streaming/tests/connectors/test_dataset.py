"""SparkStreamingDataset: sources, sinks, triggers, names and secrets."""

import json

import pytest
from kedro.io import DataCatalog
from kedro_streaming import SparkStreamingDataset
from kedro_streaming._checks.checks import check_configuration
from kedro_streaming._connectors.avro.codec import value_schema
from kedro_streaming._connectors.entry_keys import misspelt_args
from kedro_streaming._connectors.options import OptionNames
from kedro_streaming._connectors.registry import connector_for
from kedro_streaming.errors import StreamingConfigError
from pyspark.sql import functions as F
from pyspark.sql import types as T

FOREACH_BATCH_ROWS: list[int] = []


def count_batch(batch, batch_id):
    FOREACH_BATCH_ROWS.append(batch.count())


def write_json_lines(folder, name, records):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("\n".join(json.dumps(r) for r in records) + "\n")


def source(folder):
    return SparkStreamingDataset(
        filepath=str(folder), file_format="json", load_args={"schema": "id INT"}
    )


def test_saving_twice_keeps_checkpoint_mode_trigger_and_name(spark, tmp_path):
    landing, checkpoint = tmp_path / "landing", tmp_path / "checkpoint"
    save_args = {
        "output_mode": "append",
        "checkpoint": str(checkpoint),
        "trigger": {"availableNow": True},
        "query_name": "ids",
    }
    sink = SparkStreamingDataset(
        filepath=str(tmp_path / "sink"), file_format="parquet", save_args=save_args
    )

    for batch in range(2):
        write_json_lines(landing, f"{batch}.json", [{"id": batch}])
        sink.save(source(landing).load())
        assert sink.query.name == "ids"
        assert sink.query.awaitTermination(120), "availableNow must end the query"
        assert sink.query.exception() is None

    # Saving leaves the configuration as it was: the second save is the same.
    assert sink._describe()["save_args"] == save_args
    assert (checkpoint / "commits" / "1").exists()
    ids = sorted(r.id for r in spark.read.parquet(str(tmp_path / "sink")).collect())
    assert ids == [0, 1]


def test_formats_without_path_and_foreach_batch(spark, tmp_path):
    rate = SparkStreamingDataset(file_format="rate", load_args={"rowsPerSecond": 5})
    assert rate.load().isStreaming

    write_json_lines(tmp_path / "landing", "0.json", [{"id": 1}, {"id": 2}])
    sink = SparkStreamingDataset(
        save_args={
            "checkpoint": str(tmp_path / "checkpoint"),
            "trigger": {"availableNow": True},
            "foreach_batch": f"{__name__}:count_batch",
        }
    )
    sink.save(source(tmp_path / "landing").load())
    sink.query.awaitTermination(120)
    assert sink.query.exception() is None
    assert FOREACH_BATCH_ROWS == [2]


def test_sink_problems_and_secrets_never_described():
    sink = SparkStreamingDataset(
        file_format="kafka",
        save_args={"output_mode": "upsert", "trigger": {"every": "1 minute"}},
        credentials={"kafka.sasl.jaas.config": "... password='hunter2';"},
    )
    problems = " | ".join(sink.sink_problems())
    assert "has no checkpoint" in problems
    assert "output_mode 'upsert'" in problems
    assert "trigger {'every': '1 minute'}" in problems
    assert "hunter2" not in str(sink._describe())
    assert "hunter2" not in repr(sink)


def test_start_takes_the_callers_trigger_and_name_and_save_adds_no_query(
    spark, tmp_path
):
    write_json_lines(tmp_path / "landing", "0.json", [{"id": 1}])
    own = {"processingTime": "1 hour"}
    sink = SparkStreamingDataset(
        filepath=str(tmp_path / "sink"),
        file_format="parquet",
        save_args={
            "checkpoint": str(tmp_path / "checkpoint"),
            "trigger": own,
            "query_name": "own",
        },
    )
    data = source(tmp_path / "landing").load()
    try:
        query = sink.start(data, trigger={"availableNow": True}, query_name="run")
        sink.save(data)  # what Kedro does after the hooks have started the query
        assert sink.query is query and query.name == "run"
        assert query.awaitTermination(120) and query.exception() is None
        assert sink.trigger == own
        assert [q.name for q in spark.streams.active if q.name in ("run", "own")] == []
    finally:
        for active in spark.streams.active:
            if active.name in ("run", "own"):
                active.stop()


def test_a_kafka_sink_encodes_struct_values_and_passes_text_through(spark):
    """JSON with every field (nulls too) for one topic; each row's own record
    for several; text as it is; a row whose topic has no record fails."""
    one_topic = SparkStreamingDataset(
        file_format="kafka", save_args={"topic": "readings"}
    )
    rows = spark.sql(
        "SELECT 'd1' AS key, named_struct('device', 'd1', 'c', CAST(NULL AS DOUBLE)) "
        "AS value"
    )
    assert [r.value for r in one_topic.connector.encode(one_topic, rows).collect()] == [
        '{"device":"d1","c":null}'
    ]
    text = spark.sql("SELECT 'as it is' AS value")
    assert one_topic.connector.encode(one_topic, text).collect()[0].value == "as it is"

    many = SparkStreamingDataset(file_format="kafka")
    routed = spark.sql(
        "SELECT topic, named_struct("
        "'ok', IF(topic = 'ok', named_struct('n', 1), NULL), "
        "'bad', IF(topic = 'bad', named_struct('why', 'late'), NULL)) AS value "
        "FROM VALUES ('ok'), ('bad') AS t(topic)"
    )
    encoded = many.connector.encode(many, routed).orderBy("topic").collect()
    assert [(r.topic, r.value) for r in encoded] == [
        ("bad", '{"why":"late"}'),
        ("ok", '{"n":1}'),
    ]
    stray = routed.withColumn("topic", F.lit("other"))
    with pytest.raises(Exception, match="a row's topic other has no record in"):
        many.connector.encode(many, stray).collect()
    with pytest.raises(StreamingConfigError, match="without a topic"):
        many.connector.encode(many, rows)


def test_value_schema_is_the_avro_of_the_struct():
    """Each Spark type's Avro; nullable fields a union with null, default null."""
    struct = T.StructType(
        [
            T.StructField("id", T.LongType(), nullable=False),
            T.StructField("at", T.TimestampType()),
            T.StructField("day", T.DateType(), nullable=False),
            T.StructField("amount", T.DecimalType(10, 2), nullable=False),
            T.StructField("tags", T.ArrayType(T.StringType(), False), False),
            T.StructField(
                "window", T.StructType([T.StructField("n", T.IntegerType())])
            ),
        ]
    )
    assert json.loads(value_schema(struct, "sensor-readings")) == {
        "type": "record",
        "name": "sensor_readings",
        "fields": [
            {"name": "id", "type": "long"},
            {
                "name": "at",
                "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}],
                "default": None,
            },
            {"name": "day", "type": {"type": "int", "logicalType": "date"}},
            {
                "name": "amount",
                "type": {
                    "type": "bytes",
                    "logicalType": "decimal",
                    "precision": 10,
                    "scale": 2,
                },
            },
            {"name": "tags", "type": {"type": "array", "items": "string"}},
            {
                "name": "window",
                "type": [
                    "null",
                    {
                        "type": "record",
                        "name": "sensor_readings_window",
                        "fields": [
                            {"name": "n", "type": ["null", "int"], "default": None}
                        ],
                    },
                ],
                "default": None,
            },
        ],
    }
    with pytest.raises(StreamingConfigError, match="map<int,string> has no Avro"):
        value_schema(
            T.StructType(
                [T.StructField("m", T.MapType(T.IntegerType(), T.StringType()))]
            ),
            "x",
        )


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        pytest.param(
            {"save_args": {"checkpiont": "data/checkpoints/sink"}},
            "has `checkpiont` in its save_args: did you mean `checkpoint`?",
            id="checkpiont",
        ),
        pytest.param(
            {"save_args": {"checkpointLocation": "data/checkpoints/sink"}},
            "has `checkpointLocation` in its save_args: did you mean `checkpoint`?",
            id="spark-spelling",
        ),
        pytest.param(
            {"save_args": {"checkpoint": "cp", "outputMode": "update"}},
            "has `outputMode` in its save_args: did you mean `output_mode`?",
            id="outputMode",
        ),
        pytest.param(
            {"file_fromat": "parquet", "save_args": {"checkpoint": "cp"}},
            "has `file_fromat`, which a SparkStreamingDataset entry does not take: "
            "did you mean `file_format`?",
            id="file_fromat",
        ),
        pytest.param(
            {"checkpoint": "cp"},
            "has `checkpoint`, which a SparkStreamingDataset entry does not take: "
            "did you mean `save_args: {checkpoint: ...}`?",
            id="not-in-save-args",
        ),
    ],
)
def test_a_misspelt_key_is_named_with_its_match(entry, problem):
    """Kedro passes each key of the entry; a misspelt one is the one problem
    named (not the missing checkpoint it causes), before any query starts."""
    catalog = DataCatalog.from_config(
        {
            "sink": {
                "type": "kedro_streaming.SparkStreamingDataset",
                "filepath": "data/sink",
                "file_format": "parquet",
                **entry,
            }
        }
    )
    with pytest.raises(StreamingConfigError) as raised:
        check_configuration({"sink": catalog["sink"]}, {})
    assert str(raised.value) == (
        f"Streaming configuration in conf/ cannot work:\n  - 'sink' {problem}"
    )


def test_a_misspelt_load_args_key_is_named_and_spark_options_are_not(spark):
    source = SparkStreamingDataset(
        filepath="data/landing", file_format="json", load_args={"shema": "id INT"}
    )
    assert source.source_problems() == [
        "has `shema` in its load_args: did you mean `schema`?"
    ]
    # Spark's option names (this line's, and its Kafka connector's when
    # loaded) are never taken for a misspelt key of the plugin's.
    names = OptionNames(spark)
    for file_format in ("json", "csv", "parquet", "orc", "text", "kafka", "rate"):
        for direction, args in (("sink", "save_args"), ("source", "load_args")):
            known = names.known(connector_for(file_format), direction)
            if known is None:  # the Kafka connector, when not loaded
                continue
            options = {name: "x" for name in known.values()}
            dataset = SparkStreamingDataset(file_format=file_format, **{args: options})
            misspelt = misspelt_args(dataset.load_options, dataset.writer_options)
            assert misspelt == [], (file_format, direction)


@pytest.mark.parametrize(
    "name",
    [
        "kafka_security",
        "kafka_client_config",
        "kafka_python_config",
        "kafka_options",
        "reads_avro",
        "writes_avro",
        "avro_schemas",
        "avro_key_schemas",
        "encode_values",
    ],
)
def test_the_properties_of_0_10_are_gone_as_0_11_warned(name):
    dataset = SparkStreamingDataset(file_format="kafka", load_args={"subscribe": "t"})
    with pytest.raises(AttributeError, match=f"has no attribute '{name}'"):
        getattr(dataset, name)
