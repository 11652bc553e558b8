"""Change data capture end to end, over Kafka: the zone table's Debezium
events as Avro in Confluent's framing (Debezium's Avro converter), on the
session's real broker, their schema in the session's real registry. The
example's `zones` pipeline reads them from the topic and keeps the zone
table current (type 1) and with its history (type 2) in Delta; both tables
are compared with a replay of the events in plain Python, and each event no
table can keep is in the refused table with its reason."""

from __future__ import annotations

import importlib
import json
import uuid
from collections import Counter

import yaml
from kafka import KafkaProducer
from reference import zone_events
from support.common import AS_SHIPPED, kedro_run
from support.compare import assert_zone_tables
from support.kafka import point_at_broker
from support.project import combine_environments

UNKNOWN_ID = 987_654


def debezium_schema(table: str) -> str:
    """Debezium's envelope of a zone row, as its Avro converter registers
    it: the row's image before and after (``Value``), ``source``, ``op``."""
    value = {
        "type": "record",
        "name": "Value",
        "fields": [
            {"name": "LocationID", "type": "int"},
            *(
                {"name": name, "type": ["null", "string"], "default": None}
                for name in ("Borough", "Zone", "service_zone")
            ),
        ],
    }
    source = {
        "type": "record",
        "name": "Source",
        "namespace": "io.debezium.connector.postgresql",
        "fields": [
            {"name": "connector", "type": "string"},
            {"name": "db", "type": "string"},
            {"name": "table", "type": "string"},
            {"name": "lsn", "type": ["null", "long"], "default": None},
            {"name": "ts_ms", "type": "long"},
        ],
    }
    return json.dumps(
        {
            "type": "record",
            "name": "Envelope",
            "namespace": f"shop.public.{table}",
            "fields": [
                {"name": "before", "type": ["null", value], "default": None},
                {"name": "after", "type": ["null", "Value"], "default": None},
                {"name": "source", "type": source},
                {"name": "op", "type": "string"},
                {"name": "ts_ms", "type": ["null", "long"], "default": None},
            ],
        }
    )


def delivered(folder) -> list[dict]:
    """The feed's events as delivered: file by file, copies and late ones
    included."""
    return [
        json.loads(line)
        for path in sorted(folder.glob("*.json"))
        for line in path.read_text().splitlines()
    ]


def test_debezium_avro_from_kafka_kept_current_and_as_history(
    fresh_project, project_bin, plugin_tool, broker, schema_registry
):
    """The zone feed (its rows read, 3 rounds of changes, copies, late
    events) sent as Debezium's Avro, with a tombstone after the first delete,
    a truncate event and a frame whose schema id the registry does not have:
    `kedro run --pipelines zones` keeps exactly the replay's tables, and
    refuses those three, each with its reason."""
    plugin_tool("kafka")  # the plugin's source on the path
    plugin = importlib.import_module("kedro_streaming")
    project, servers = fresh_project, broker.bootstrap_servers
    point_at_broker(project, servers)
    topic = f"shop.public.zones-{uuid.uuid4().hex[:8]}"
    combine_environments(project, "cdc", "kafka", "delta")
    catalog_file = project / "conf/cdc/catalog.yml"
    catalog = yaml.safe_load(catalog_file.read_text())
    catalog["zone_changes"] = {
        "type": "kedro_streaming.SparkStreamingDataset",
        "file_format": "kafka",
        "credentials": "kafka",
        "avro": {
            "schema_registry_url": schema_registry["url"],
            "credentials": "schema_registry",
        },
        "load_args": {
            "kafka.bootstrap.servers": servers,
            "subscribe": topic,
            "startingOffsets": "earliest",
        },
    }
    catalog_file.write_text(yaml.safe_dump(catalog, sort_keys=False))

    registry = plugin.SchemaRegistry(schema_registry["url"])
    frame = plugin.avro_framer(registry, f"{topic}-value", debezium_schema("zones"))
    changes = project / "data/01_raw/zone_changes"
    events = delivered(changes)
    last = max(e["source"]["lsn"] for e in events)
    truncate = {**events[0], "op": "t", "before": None, "after": None}
    truncate["source"] = {**events[0]["source"], "lsn": last + 1}
    messages = [(str(_key(e)).encode(), frame(e)) for e in events]
    first_delete = next(i for i, e in enumerate(events) if e["op"] == "d")
    messages.insert(first_delete + 1, (str(_key(events[first_delete])).encode(), None))
    good = messages[0][1]
    messages.append((b"truncate", frame(truncate)))
    messages.append((b"?", b"\x00" + UNKNOWN_ID.to_bytes(4, "big") + good[5:]))
    producer = KafkaProducer(bootstrap_servers=servers, acks="all")
    try:
        for key, value in messages:
            producer.send(topic, key=key, value=value, partition=0)
        producer.flush()
    finally:
        producer.close()

    kedro_run(
        project_bin, project, "--env", "cdc", "--pipelines", "zones", params=AS_SHIPPED
    )

    # conf/delta wins: its output_root, data/delta.
    refused = assert_zone_tables(project / "data/delta", zone_events(changes))
    assert Counter(refused.problems) == {
        "null value (a tombstone)": 1,
        "unsupported operation 't' (truncate)": 1,
        f"unknown schema id {UNKNOWN_ID}: the schema registry at "
        f"{schema_registry['url']} has none": 1,
    }
    # Each refused event keeps where it came from.
    assert sorted(refused.kafka_offset) == [
        first_delete + 1,
        len(messages) - 2,
        len(messages) - 1,
    ]


def _key(event: dict) -> int:
    image = event["before"] if event["op"] == "d" else event["after"]
    return image["LocationID"]
