import pytest
from kedro.io import DataCatalog
from kedro.pipeline import node, pipeline

from {{ cookiecutter.python_package }}.hooks import (
    StreamingConfigError,
    StreamingQueryHooks,
    check_kafka_connector,
    run_trigger,
)

DATASET = "{{ cookiecutter.python_package }}.datasets.SparkStreamingDataset"


def test_kafka_connector_must_match_the_running_spark():
    conf = {"spark.jars.packages": "org.apache.spark:spark-sql-kafka-0-10_2.12:3.5.1"}
    with pytest.raises(StreamingConfigError) as error:
        check_kafka_connector(conf, "4.0.0", "2.13")
    message = str(error.value)
    assert "spark-sql-kafka-0-10_2.12:3.5.1" in message
    assert "4.0.0 built for Scala 2.13" in message
    assert "org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.0" in message

    conf = {"spark.jars.packages": "org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.0"}
    check_kafka_connector(conf, "4.0.0", "2.13")


def test_run_trigger_switch():
    assert run_trigger({"trigger": "available_now"}) == {"availableNow": True}
    assert run_trigger({"trigger": "processing_time"}) is None
    with pytest.raises(StreamingConfigError, match="--params trigger=available_now"):
        run_trigger({"trigger": "sometimes"})


def test_bad_streaming_configuration_fails_before_anything_starts(tmp_path):
    catalog = DataCatalog.from_config(
        {
            "json_without_schema": {"type": DATASET, "filepath": str(tmp_path), "file_format": "json"},
            "kafka_without_topic": {"type": DATASET, "file_format": "kafka",
                                    "load_args": {"kafka.bootstrap.servers": "localhost:9092"}},
            "a": {"type": DATASET, "filepath": "a", "file_format": "parquet",
                  "save_args": {"checkpoint": "data/checkpoints/shared"}},
            "b": {"type": DATASET, "filepath": "b", "file_format": "parquet",
                  "save_args": {"checkpoint": "data/checkpoints/shared"}},
            "c": {"type": DATASET, "filepath": "c", "file_format": "parquet"},
            "to_kafka": {"type": DATASET, "file_format": "kafka",
                         "save_args": {"checkpoint": "data/checkpoints/to_kafka"}},
        }
    )
    nodes = pipeline(
        [node(lambda x, y: (x, x, x, y), ["json_without_schema", "kafka_without_topic"],
              ["a", "b", "c", "to_kafka"])]
    )
    hooks = StreamingQueryHooks()
    hooks.after_context_created(type("Context", (), {"params": {}})())

    with pytest.raises(StreamingConfigError) as error:
        hooks.before_pipeline_run({}, nodes, catalog)
    message = str(error.value)
    assert "a, b share the checkpoint 'data/checkpoints/shared'" in message
    assert "'c' has no checkpoint" in message
    assert "'json_without_schema' reads json files from" in message
    assert "'kafka_without_topic' reads Kafka without a topic" in message
    assert "'to_kafka' reads or writes Kafka without bootstrap servers" in message
    assert "'to_kafka' writes to Kafka without a topic" in message
