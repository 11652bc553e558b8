"""Every connector, in the order the run-level checks ask them."""

from __future__ import annotations

from kedro_streaming._connectors.avro_checks import Avro
from kedro_streaming._connectors.base import Connector
from kedro_streaming._connectors.files import Files
from kedro_streaming._connectors.kafka_checks import Kafka

# In the order their checks run: files need no service, Kafka's brokers
# come before the Avro that travels over them.
CONNECTORS: tuple[Connector, ...] = (Files(), Kafka(), Avro())
