"""A Kafka entry's own problems, before any query starts, and its stores."""

import subprocess

import pytest
from kedro_streaming import KafkaSecurity, SparkStreamingDataset, StreamingConfigError
from kedro_streaming._connectors.kafka.stores import keytool
from pyspark.sql import functions as F


def test_a_kafka_sink_needs_a_topic_option_or_column(spark):
    sink_without_topic = SparkStreamingDataset(
        file_format="kafka", save_args={"checkpoint": "c"}
    )
    rows = spark.createDataFrame([("k", "v")], "key STRING, value STRING")
    assert sink_without_topic.data_problems(rows) == [
        "writes to Kafka without a topic: add `save_args: {topic: ...}`, or give "
        "each row its topic in a `topic` column"
    ]
    assert sink_without_topic.data_problems(rows.withColumn("topic", F.lit("t"))) == []
    # A struct value with a topic column: one record per topic, each a struct.
    routed = spark.sql(
        "SELECT 't' AS topic, named_struct('t', named_struct('n', 1), 'n', 2) AS value"
    )
    assert sink_without_topic.data_problems(routed) == [
        "names each row's topic in a `topic` column, so its `value` must hold one "
        "record (a struct) per topic, named after it; n is not a struct"
    ]


@pytest.mark.parametrize(
    ("key_password", "given", "refused"),
    [
        pytest.param("store-secret", None, False, id="key under the store's password"),
        pytest.param("key-secret", "key-secret", False, id="a key password of its own"),
        pytest.param("key-secret", "wrong", True, id="a wrong key password"),
    ],
)
def test_a_jks_key_store_opens_as_the_client_reads_it(
    tmp_path, key_password, given, refused
):
    """A JKS key store (mTLS), read by the JDK's keytool: its key under the
    store's password or one of its own (``kafka.ssl.key.password``)."""
    store = tmp_path / "client.jks"
    subprocess.run(
        [keytool(), "-genkeypair", "-alias", "client", "-keyalg", "RSA"]
        + ["-keystore", str(store), "-storetype", "JKS", "-dname", "CN=client"]
        + ["-storepass", "store-secret", "-keypass", key_password, "-noprompt"],
        check=True,
        capture_output=True,
    )
    settings = {
        "kafka.security.protocol": "SSL",
        "kafka.ssl.keystore.location": str(store),
        "kafka.ssl.keystore.type": "JKS",
        "kafka.ssl.keystore.password": "store-secret",
    }
    if given:
        settings["kafka.ssl.key.password"] = given
    if refused:
        with pytest.raises(StreamingConfigError, match="does not open"):
            KafkaSecurity(settings).ssl_context  # noqa: B018
    else:
        KafkaSecurity(settings).ssl_context  # the key and its certificate load
