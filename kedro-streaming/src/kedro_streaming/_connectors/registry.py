"""Every connector: the one each catalog format belongs to, and all of them
in the order the run-level checks ask them."""

from __future__ import annotations

from kedro_streaming._connectors.avro.option import Avro
from kedro_streaming._connectors.base import Connector
from kedro_streaming._connectors.debugging import Debugging, Generated
from kedro_streaming._connectors.delta import Delta
from kedro_streaming._connectors.files import Files
from kedro_streaming._connectors.kafka.connector import Kafka

# In the order their checks run: files need no service, Kafka's brokers
# come before the Avro that travels over them.
CONNECTORS: tuple[Connector, ...] = (
    Files(),
    Delta(),
    Kafka(),
    Avro(),
    Generated(),
    Debugging(),
)
_OWNERS = {
    fmt: type(connector) for connector in CONNECTORS for fmt in connector.formats
}


def connector_for(file_format: str) -> Connector:
    """The connector of a catalog entry's ``file_format``: Spark's plain
    behaviour for a format no connector owns (a data source of the user's)."""
    return _OWNERS.get(file_format, Connector)(file_format)
