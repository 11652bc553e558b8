# The public names, each from the private module that holds it: the one
# mapping, read by type checkers and IDEs, and by __init__.py's lazy_loader
# at import time (so only `from .module import name as name` lines).
from ._connectors.avro.registry import SchemaRegistry as SchemaRegistry
from ._connectors.avro.registry import avro_framer as avro_framer
from ._connectors.avro.registry import avro_reader as avro_reader
from ._connectors.delta import check_delta_package as check_delta_package
from ._connectors.delta import delta_package_for as delta_package_for
from ._connectors.kafka.clients import kafka_consumer as kafka_consumer
from ._connectors.kafka.clients import kafka_producer as kafka_producer
from ._connectors.kafka.connector import check_kafka_connector as check_kafka_connector
from ._connectors.kafka.security import KafkaSecurity as KafkaSecurity
from ._dataset import SparkStreamingDataset as SparkStreamingDataset
from ._nodes.debezium import debezium_changes as debezium_changes
from ._nodes.expectations import check_expectations as check_expectations
from ._nodes.lookup import Lookup as Lookup
from ._nodes.records import PROVENANCE_COLUMNS as PROVENANCE_COLUMNS
from ._nodes.records import parse_records as parse_records
from ._nodes.records import record_origin as record_origin
from ._run.hooks import StreamingQueryHooks as StreamingQueryHooks
from ._session.lines import move_to_spark as move_to_spark
from ._session.packages import local_scala_version as local_scala_version
from ._session.session import SparkHooks as SparkHooks
from ._session.session import spark_session as spark_session
from ._table import SparkDataset as SparkDataset
from .errors import StreamingConfigError as StreamingConfigError
from .errors import StreamingQueryFailed as StreamingQueryFailed

__version__: str
__all__ = [
    "KafkaSecurity",
    "Lookup",
    "PROVENANCE_COLUMNS",
    "SchemaRegistry",
    "SparkDataset",
    "SparkHooks",
    "SparkStreamingDataset",
    "StreamingConfigError",
    "StreamingQueryFailed",
    "StreamingQueryHooks",
    "avro_framer",
    "avro_reader",
    "check_delta_package",
    "check_expectations",
    "check_kafka_connector",
    "debezium_changes",
    "delta_package_for",
    "kafka_consumer",
    "kafka_producer",
    "local_scala_version",
    "move_to_spark",
    "parse_records",
    "record_origin",
    "spark_session",
]
