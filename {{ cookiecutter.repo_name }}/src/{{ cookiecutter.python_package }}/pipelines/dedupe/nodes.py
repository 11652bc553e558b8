"""Dedupe: the realtime pipeline's messages, each trip once.

Kafka's sink is at least once: after a crash, the realtime pipeline writes
again what it wrote since its last checkpoint. A message names the record it
came from (``kafka_topic``, ``kafka_partition``, ``kafka_offset``: one trip
as it entered), so copies share that key and the time the record entered
(``kafka_timestamp``), which is the event time here.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

ORIGIN = ("kafka_topic", "kafka_partition", "kafka_offset", "kafka_timestamp")
_ORIGIN_SCHEMA = (
    "kafka_topic STRING, kafka_partition INT, kafka_offset BIGINT, "
    "kafka_timestamp TIMESTAMP"
)


def unique_trips(trip_messages: DataFrame, dedupe: dict) -> DataFrame:
    """Each trip's message once, however often it was written.

    Spark keeps each key until the watermark, the latest ``kafka_timestamp``
    seen minus ``dedupe["copies_within"]``, passes its own: a copy written
    later than that after its trip is behind the watermark, and Spark drops
    it as late ("late state rows dropped" on the progress line). A message
    whose origin does not parse (not one of this project's) is kept, once
    per copy, keyed by where it was read, with a null origin.

    Args:
        trip_messages: The Kafka source of the checked-trips topics.
        dedupe: ``{copies_within: "10 minutes"}``: the longest a copy can
            follow its original (a checkpoint interval and a restart).

    Returns:
        The origin columns, ``message`` (the value as text),
        ``message_topic``, ``message_partition``, ``message_offset``
        (where the copy kept was read) and ``message_timestamp``.
    """
    # Parsed once, into one column: a field taken from `from_json` itself
    # would be parsed once per field (Spark prunes each to its field).
    messages = trip_messages.select(
        F.from_json(F.col("value").cast("string"), _ORIGIN_SCHEMA).alias("_origin"),
        F.col("value").cast("string").alias("message"),
        F.col("topic").alias("message_topic"),
        F.col("partition").alias("message_partition"),
        F.col("offset").alias("message_offset"),
        F.col("timestamp").alias("message_timestamp"),
    )
    messages = messages.select(
        *[f"_origin.{name}" for name in ORIGIN],
        *[name for name in messages.columns if name.startswith("message")],
    )
    parsed = F.col("kafka_offset").isNotNull()
    # The key and time of a message without an origin: its own, so that it is
    # kept once and never taken for a copy of another.
    keyed = messages.withColumns(
        {
            "_key": F.when(
                parsed,
                F.concat_ws(":", "kafka_topic", "kafka_partition", "kafka_offset"),
            ).otherwise(
                F.concat_ws(
                    ":",
                    F.lit("unparsed"),
                    "message_topic",
                    "message_partition",
                    "message_offset",
                )
            ),
            "_event_time": F.coalesce("kafka_timestamp", "message_timestamp"),
        }
    )
    return (
        keyed.withWatermark("_event_time", dedupe["copies_within"])
        .dropDuplicatesWithinWatermark(["_key"])
        .drop("_key", "_event_time")
    )
