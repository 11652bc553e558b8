"""Kafka clients for a project's own code (a script, a test, a backfill),
configured as its pipelines are: ``env`` alone, the ``kafka`` globals and
credentials entry of ``conf/<env>`` (as ``kedro streams send | watch`` read
them); ``dataset``, that catalog entry's brokers and credentials."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kafka.admin import KafkaAdminClient
from kafka.errors import KafkaError

from kedro_streaming._connectors.kafka.probes import (
    client_failure,
    connection_problem,
    kafka_python_logs,
)
from kedro_streaming._connectors.kafka.security import (
    KafkaSecurity,
    client_config,
    entry_security,
)
from kedro_streaming.errors import StreamingConfigError


def kafka_producer(
    env: str = "kafka",
    *,
    dataset: str | None = None,
    project_path: str | Path | None = None,
    **overrides: Any,
):
    """A kafka-python ``KafkaProducer`` configured from ``conf/<env>``.

    Args:
        env: The configuration environment, as ``kedro run --env``.
        dataset: A Kafka dataset of the catalog whose brokers and
            credentials to use (default: the env's ``kafka`` globals and
            credentials entry).
        project_path: The project's root (default: the working directory).
        **overrides: Further ``KafkaProducer`` arguments (``acks``,
            ``max_request_size``...), taking precedence.

    Example:
        ```python
        from kedro_streaming import kafka_producer

        producer = kafka_producer(env="kafka", acks="all")  # conf/kafka
        producer.send("sensor-readings", b'{"device": "d1", "temperature_c": 21.5}')
        producer.flush()
        ```
    """
    from kafka import KafkaProducer  # noqa: PLC0415 (kafka-python: when asked for)

    return KafkaProducer(**_client_arguments(env, dataset, project_path), **overrides)


def kafka_consumer(
    *topics: str,
    env: str = "kafka",
    dataset: str | None = None,
    project_path: str | Path | None = None,
    **overrides: Any,
):
    """A kafka-python ``KafkaConsumer`` of ``topics`` configured from
    ``conf/<env>``; the arguments as :func:`kafka_producer`'s.

    Example:
        ```python
        from kedro_streaming import kafka_consumer

        # The brokers and credentials the raw_readings dataset's query uses.
        consumer = kafka_consumer(
            "sensor-readings", dataset="raw_readings", auto_offset_reset="earliest"
        )
        for message in consumer:
            print(message.offset, message.value)
        ```
    """
    from kafka import KafkaConsumer  # noqa: PLC0415

    return KafkaConsumer(
        *topics,
        **_client_arguments(env, dataset, project_path),
        **overrides,
    )


def _client_arguments(
    env: str, dataset: str | None, project_path: str | Path | None
) -> dict[str, Any]:
    """kafka-python's client arguments (``bootstrap_servers`` and security)
    from ``conf/<env>``, secrets included: never for display; a
    StreamingConfigError says why the brokers cannot be used."""
    from kedro_streaming._project import project_config  # noqa: PLC0415

    root = Path(project_path or Path.cwd())
    if dataset is not None:
        servers, credentials = _dataset_config(env, dataset, root)
    else:
        config = project_config(env, root)
        servers = (config["globals"].get("kafka") or {}).get("bootstrap_servers")
        credentials = config["credentials"].get("kafka")
        if not servers:
            raise StreamingConfigError(
                f"conf/{env}/globals.yml sets no kafka.bootstrap_servers: set it, or "
                "name a Kafka dataset of the catalog (dataset=...)"
            )
    try:
        security = client_security(credentials, servers)
    except ValueError as error:
        raise StreamingConfigError(str(error)) from None
    return {"bootstrap_servers": servers, **security}


def _dataset_config(env: str, name: str, root: Path) -> tuple[str, KafkaSecurity]:
    """A catalog dataset's brokers and security, as its query connects."""
    from kedro_streaming._connectors.kafka.connector import Kafka  # noqa: PLC0415 (imports PySpark)
    from kedro_streaming._project import project_catalog  # noqa: PLC0415

    catalog = project_catalog(env, root)
    dataset = catalog.get(name) if name in catalog else None
    if not isinstance(getattr(dataset, "connector", None), Kafka):
        kafka_datasets = [
            entry
            for entry in catalog.keys()
            if isinstance(getattr(catalog.get(entry), "connector", None), Kafka)
        ]
        raise StreamingConfigError(
            f"'{name}' is not a Kafka dataset of the catalog of conf/{env} "
            f"(its Kafka datasets: {', '.join(kafka_datasets) or 'none'})"
        )
    servers = client_config(dataset).get("bootstrap.servers")
    if not servers:
        raise StreamingConfigError(
            f"dataset '{name}' sets no kafka.bootstrap.servers in its load_args "
            "or save_args: set it to the brokers' host:port"
        )
    return servers, entry_security(dataset)


def client_security(
    credentials: dict[str, Any] | KafkaSecurity | None, servers: str | None = None
) -> dict[str, Any]:
    """kafka-python settings from a Kafka entry of credentials.yml, as the
    project's Kafka datasets take them; given ``servers``, the connection is
    tried first (a ValueError names what does not work)."""
    security = credentials
    if not isinstance(security, KafkaSecurity):
        security = KafkaSecurity(credentials)
    try:
        settings = security.kafka_python()
    except StreamingConfigError as error:  # a store that does not load
        raise ValueError(str(error)) from None
    if servers:
        # From the broker's own answers, at once: kafka-python would retry a
        # refused login until its timeout.
        try:
            problem = connection_problem(servers, security)
        except StreamingConfigError as error:
            raise ValueError(str(error)) from None
        if problem:
            raise ValueError(f"the Kafka broker at {servers} {problem}")
        with kafka_python_logs() as logged:
            try:
                KafkaAdminClient(
                    bootstrap_servers=servers, bootstrap_timeout_ms=10_000, **settings
                ).close()
            except KafkaError as error:
                failure = client_failure(servers, security, error, logged)
                raise ValueError(f"the Kafka broker at {servers} {failure}") from None
    return settings
