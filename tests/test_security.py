"""Kafka security, as every client of a project reads it: each way a TLS or
SASL connection goes wrong is named, against the session's real broker (its
TLS listeners, and SSL listeners with an expired, a not yet valid and a
wrongly named certificate). Runs of the example over each protocol are in
test_guarantees (SASL_SSL/SCRAM, SSL with JKS), test_realtime (SASL_SSL/PLAIN)
and test_spark_lines (mutual TLS)."""

from __future__ import annotations

import importlib
import os
import re
import shutil
import subprocess
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from cryptography.hazmat.primitives.serialization import Encoding
from kafka.admin import (
    ACL,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
    NewTopic,
    ResourcePattern,
    ResourceType,
)
from support.common import (
    EVENT_HUBS_PASSWORD,
    EVENT_HUBS_USER,
    SASL_PASSWORD,
    SASL_USER,
)
from support.security import java_trust_store


@pytest.fixture(scope="module")
def security(plugin_tool):
    """The plugin's Kafka security and probes (private modules), from this
    repository's source."""
    plugin_tool("kafka")  # puts the plugin's source on the path
    return SimpleNamespace(
        **{
            **vars(
                importlib.import_module("kedro_streaming._connectors.kafka.security")
            ),
            **vars(importlib.import_module("kedro_streaming._connectors.kafka.probes")),
        }
    )


def test_each_connection_problem_is_named(security, broker, plugin_tool, tmp_path):  # noqa: PLR0914 (one case a line)
    tls = broker.tls_dir
    password = (tls / "store-password").read_text()
    trust_pem = {
        "security_protocol": "SSL",
        "kafka.ssl.truststore.location": str(tls / "ca.pem"),
        "kafka.ssl.truststore.type": "PEM",
    }
    another_ca = plugin_tool("certificates").CertificateAuthority.new("another CA")
    other_ca_pem = tmp_path / "other-ca.pem"
    other_ca_pem.write_bytes(another_ca.certificate.public_bytes(Encoding.PEM))
    servers = broker.tls_bootstrap_servers
    plain = broker.bootstrap_servers

    def problem(address: str, credentials: dict) -> str | None:
        try:
            return security.connection_problem(
                address, security.KafkaSecurity(credentials)
            )
        except security.StreamingConfigError as error:
            return str(error)

    # Each right configuration connects: PEM, PKCS12 and JKS stores alike.
    p12_trust = {
        "security_protocol": "SSL",
        "kafka.ssl.truststore.location": str(tls / "truststore.p12"),
        "kafka.ssl.truststore.type": "PKCS12",
        "kafka.ssl.truststore.password": password,
    }
    jks_trust = {
        **p12_trust,
        "kafka.ssl.truststore.location": str(java_trust_store(tls)),
        "kafka.ssl.truststore.type": "JKS",
    }
    p12_key = {
        "kafka.ssl.keystore.location": str(tls / "client.p12"),
        "kafka.ssl.keystore.type": "PKCS12",
        "kafka.ssl.keystore.password": password,
    }
    pem_key = {
        "kafka.ssl.keystore.location": str(tls / "client.pem"),
        "kafka.ssl.keystore.type": "PEM",
    }
    assert problem(servers["SSL"], trust_pem) is None
    assert problem(servers["SSL"], p12_trust) is None
    assert problem(servers["SSL"], jks_trust) is None
    assert problem(servers["MTLS"], {**jks_trust, **p12_key}) is None
    assert problem(servers["MTLS"], {**trust_pem, **pem_key}) is None
    assert problem(plain, {}) is None
    scram = {
        **trust_pem,
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "username": SASL_USER,
    }
    plain_login = {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "username": SASL_USER,
    }
    assert problem(servers["SASL_SSL"], {**scram, "password": SASL_PASSWORD}) is None
    assert (
        problem(
            broker.sasl_bootstrap_servers, {**plain_login, "password": SASL_PASSWORD}
        )
        is None
    )
    wrong = f"wrong-{uuid.uuid4().hex}"

    cases = {
        # A refused login, from the broker's answer, at once (kafka-python
        # would retry it for 30 s).
        "a wrong password, SCRAM over TLS": (
            servers["SASL_SSL"],
            {**scram, "password": wrong},
            f"refused the SCRAM-SHA-512 login of user '{SASL_USER}': check the "
            "password (and the user) of the credentials",
        ),
        "a wrong password, PLAIN without TLS": (
            broker.sasl_bootstrap_servers,
            {**plain_login, "password": wrong},
            f"refused the PLAIN login of user '{SASL_USER}': check the password "
            "(and the user) of the credentials",
        ),
        "a mechanism the listener does not take": (
            servers["SASL_SSL"],
            {**scram, "sasl_mechanism": "SCRAM-SHA-256", "password": SASL_PASSWORD},
            "does not take the SCRAM-SHA-256 login (it takes PLAIN, SCRAM-SHA-512): "
            "set sasl_mechanism in the credentials",
        ),
        "an unknown CA": (
            servers["SSL"],
            {**trust_pem, "kafka.ssl.truststore.location": str(other_ca_pem)},
            "presents a certificate signed by a CA the trust store does not hold "
            "(self-signed certificate in certificate chain): set "
            "kafka.ssl.truststore.location in the credentials to the CA that "
            "signed the brokers' certificates",
        ),
        "no trust store, so Python's default CAs": (
            servers["SSL"],
            {"security_protocol": "SSL"},
            "presents a certificate signed by a CA the trust store does not hold",
        ),
        "a hostname mismatch": (
            servers["OTHER_HOST"],
            trust_pem,
            "presents a certificate that does not name the host it was reached "
            "by (localhost): connect by a name the certificate holds",
        ),
        "an expired certificate": (
            servers["EXPIRED"],
            trust_pem,
            "presents a certificate that has expired: have the broker's "
            "certificate renewed",
        ),
        "a certificate not valid yet": (
            servers["NOT_YET_VALID"],
            trust_pem,
            "presents a certificate that is not valid yet: check this machine's clock",
        ),
        "a missing trust store": (
            servers["SSL"],
            {**trust_pem, "kafka.ssl.truststore.location": str(tmp_path / "no.pem")},
            f"the trust store {tmp_path / 'no.pem'} (kafka.ssl.truststore.location "
            "in the credentials) does not exist: give the path of the file on "
            "this machine",
        ),
        "an unreadable trust store": (
            servers["SSL"],
            {**trust_pem, "kafka.ssl.truststore.location": str(tmp_path)},
            f"the trust store {tmp_path} (kafka.ssl.truststore.location in the "
            "credentials) cannot be read: Is a directory",
        ),
        "a PEM trust store without its type (Kafka's default: JKS)": (
            servers["SSL"],
            {**trust_pem, "kafka.ssl.truststore.type": ""},
            f"the trust store {tls / 'ca.pem'} is a PEM file, read as JKS: set "
            "kafka.ssl.truststore.type: PEM in the credentials",
        ),
        "a wrong PKCS12 trust store password": (
            servers["SSL"],
            {**p12_trust, "kafka.ssl.truststore.password": "wrong"},
            "the trust store password (kafka.ssl.truststore.password in the "
            f"credentials) does not open {tls / 'truststore.p12'}, or the file is "
            "not a PKCS12 store",
        ),
        "a wrong JKS trust store password": (
            servers["SSL"],
            {**jks_trust, "kafka.ssl.truststore.password": "wrong"},
            "the trust store password (kafka.ssl.truststore.password in the "
            f"credentials) does not open {tls / 'truststore.jks'}, or the file is "
            "not a JKS store",
        ),
        "a wrong key store password": (
            servers["MTLS"],
            {**trust_pem, **p12_key, "kafka.ssl.keystore.password": "wrong"},
            "the key store password (kafka.ssl.keystore.password in the "
            f"credentials) does not open {tls / 'client.p12'}",
        ),
        "no client certificate for mutual TLS": (
            servers["MTLS"],
            trust_pem,
            "requires a client certificate (mutual TLS) it trusts, which the "
            "credentials do not give: set kafka.ssl.keystore.location",
        ),
        "a plain client on a TLS port": (
            servers["SSL"],
            {},
            "speaks TLS on this port, while security_protocol is PLAINTEXT or "
            "SASL_PLAINTEXT (the default, when the credentials entry the dataset "
            "names sets none: Kedro reads conf/base and the run's --env only, not "
            "conf/local with --env kafka): set security_protocol to SSL (or "
            "SASL_SSL)",
        ),
        "a TLS client on a plain port": (
            plain,
            trust_pem,
            "does not speak TLS on this port, while security_protocol is SSL: use "
            "the port of its TLS listener, or the protocol of this one",
        ),
    }
    found = {
        name: problem(address, creds) for name, (address, creds, _) in cases.items()
    }
    for name, (_, _, expected) in cases.items():
        assert expected in (found[name] or ""), (name, found[name])
        assert password not in (found[name] or "") and wrong not in (found[name] or "")

    # A refused login, as the development tools (`send`, `watch`) name it.
    login = {
        **trust_pem,
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "username": SASL_USER,
    }
    kafka = plugin_tool("kafka")
    assert kafka.client_security(
        {**login, "password": SASL_PASSWORD}, servers["SASL_SSL"]
    )
    with pytest.raises(ValueError) as refused:
        kafka.client_security({**login, "password": "wrong"}, servers["SASL_SSL"])
    assert str(refused.value) == (
        f"the Kafka broker at {servers['SASL_SSL']} refused the SCRAM-SHA-512 "
        f"login of user '{SASL_USER}': check the password (and the user) of the "
        "credentials"
    )


def test_jaas_values_are_escaped_and_read_back_whole(security):
    """The login Spark's client gets: whatever the password holds, Kafka's
    JAAS syntax reads one username and one password back. (That Kafka's own
    parser does too is shown by the SCRAM login with SASL_PASSWORD, which
    holds a quote, ` unsafe="1"`, a backslash, a semicolon, a line break and
    non-ASCII: test_guarantees.)"""
    for password in (SASL_PASSWORD, '"', "\\", 'a\\"; b="c', "x\r\ny", "ü€𝄞"):
        config = security.jaas_config("SCRAM-SHA-512", 'us"er', password)
        assert config.startswith(
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
        )
        assert security.jaas_options(config) == {
            "username": 'us"er',
            "password": password,
        }
        assert "\n" not in config and "\r" not in config


def test_a_topic_the_user_may_not_read_is_named_as_such(security, broker, plugin_tool):
    """With ACLs, a topic denied to a user is left out of its listing: told
    apart from a missing topic by asking for it (TOPIC_AUTHORIZATION_FAILED).
    An Azure Event Hubs-shaped login ($ConnectionString) works as any other."""
    suffix = uuid.uuid4().hex[:8]
    denied, allowed = f"denied-{suffix}", f"allowed-{suffix}"
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    try:
        admin.create_topics([NewTopic(denied, 1, 1), NewTopic(allowed, 1, 1)])
        created = admin.create_acls(
            [
                ACL(
                    f"User:{SASL_USER}",
                    "*",
                    ACLOperation.ALL,
                    ACLPermissionType.DENY,
                    ResourcePattern(
                        ResourceType.TOPIC, denied, ACLResourcePatternType.LITERAL
                    ),
                )
            ]
        )
        assert created["failed"] == []
    finally:
        admin.close()
    login = security.KafkaSecurity(
        {
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": "SCRAM-SHA-512",
            "username": SASL_USER,
            "password": SASL_PASSWORD,
            "kafka.ssl.truststore.location": str(broker.tls_dir / "ca.pem"),
            "kafka.ssl.truststore.type": "PEM",
        }
    )
    servers = broker.tls_bootstrap_servers["SASL_SSL"]
    until = time.monotonic() + 10  # the ACL reaches the broker's metadata
    while (found := security.forbidden_topics(servers, login, [denied, allowed])) != [
        denied
    ] and time.monotonic() < until:
        time.sleep(0.2)
    assert found == [denied]

    event_hubs_shaped = {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "PLAIN",
        "username": EVENT_HUBS_USER,
        "password": EVENT_HUBS_PASSWORD,
        "kafka.ssl.truststore.location": str(broker.tls_dir / "ca.pem"),
        "kafka.ssl.truststore.type": "PEM",
    }
    kafka = plugin_tool("kafka")
    assert kafka.client_security(event_hubs_shaped, servers)["sasl_plain_username"] == (
        EVENT_HUBS_USER
    )


def _compose_broker(broker_tool, environment: dict, secrets: Path, jvm_options):
    """The compose file's broker, started on free ports here (the session's
    broker may hold the compose ones): the ports by compose port, and the
    broker. A port found free and taken before the broker bound it (another
    process's connection, on a busy machine) is chosen again."""
    for attempt in range(3):
        ports = {
            compose_port: free
            for compose_port, free in zip(
                (9092, 19092, 9093, 9094, 9095, 9099), broker_tool.free_ports(6)
            )
        }
        properties = _image_properties(environment, secrets)
        for key in ("listeners", "advertised.listeners", "controller.quorum.voters"):
            properties[key] = re.sub(
                r":(\d{4,5})\b", lambda m: f":{ports[int(m[1])]}", properties[key]
            )
        del properties["log.dirs"]  # the container's path: a temporary folder here
        broker = broker_tool.LocalKafka(
            port=ports[9092], extra_properties=properties, jvm_options=jvm_options
        )
        try:
            return ports, broker.start()
        except broker_tool.BrokerError as error:
            if "Address already in use" not in str(error) or attempt == 2:
                raise
            print(f"a port was taken before the broker bound it: {error}"[:300])
    raise AssertionError("unreachable")


def _image_properties(environment: dict[str, str], secrets: Path) -> dict[str, str]:
    """The server.properties Kafka's Docker image (apache/kafka) writes from a
    service's environment, as its scripts do: the keystore settings derived
    from KAFKA_SSL_*_FILENAME and *_CREDENTIALS under /etc/kafka/secrets,
    then each KAFKA_ variable renamed (`_` to `.`, `__` to `_`, `___` to `-`,
    lower case) unless excluded; a value holding `=` is dropped by the image."""
    env = dict(environment)
    if "SSL://" in env["KAFKA_ADVERTISED_LISTENERS"]:
        env["KAFKA_SSL_KEYSTORE_LOCATION"] = (
            f"/etc/kafka/secrets/{env['KAFKA_SSL_KEYSTORE_FILENAME']}"
        )
        for name in ("KEY", "KEYSTORE"):
            file = secrets / env[f"KAFKA_SSL_{name}_CREDENTIALS"]
            env[f"KAFKA_SSL_{name}_PASSWORD"] = file.read_text()
    excluded = {"KAFKA_OPTS", "KAFKA_HEAP_OPTS", "KAFKA_VERSION", "KAFKA_JMX_OPTS"}
    properties = {}
    for name, value in env.items():
        if not name.startswith("KAFKA_") or name in excluded:
            continue
        assert "=" not in str(value), f"the image would drop {name}"
        key = re.sub(
            r"[^_]_[^_]", lambda m: m.group().replace("_", "."), name[len("KAFKA_") :]
        )
        key = key.replace("___", "-").replace("__", "_").lower()
        properties[key] = str(value).replace("/etc/kafka/secrets", str(secrets))
    return properties


def test_the_compose_tls_broker_serves_each_listener(
    security, generated_project, plugin_tool, project_bin, tmp_path
):
    """docker-compose.tls.yml, read as Docker Compose and Kafka's image read
    it, runs a real broker (no Docker here: the same Kafka from its jars,
    with the properties the image would write): the files of
    `kedro streams broker tls-files` serve its SSL, MTLS and SASL_SSL
    listeners, PLAIN logins come from the JAAS file (escaped: SASL_PASSWORD
    holds quotes, a backslash, `;`, a line break and non-ASCII), SCRAM ones
    from `kedro streams broker add-users`."""
    broker_tool = plugin_tool("broker")
    base = yaml.safe_load((generated_project / "docker-compose.yml").read_text())
    tls = yaml.safe_load((generated_project / "docker-compose.tls.yml").read_text())
    kafka = tls["services"]["kafka"]
    environment = base["services"]["kafka"]["environment"] | kafka["environment"]
    assert kafka["volumes"] == ["kafka-secrets:/etc/kafka/secrets:ro"]
    assert "kafka-secrets" in tls["volumes"]

    def streams(*args: str) -> None:
        subprocess.run(
            [project_bin / "python", "-m", "kedro_streaming.devtools", *args],
            env={**os.environ, "KAFKA_SASL_PASSWORD": SASL_PASSWORD},
            cwd=tmp_path,
            check=True,
        )

    data = tmp_path / "kafka-broker"
    streams("broker", "tls-files", "--sasl-user", SASL_USER, "--data-dir", str(data))
    # What the one-shot tls-files service copies into the broker's volume.
    script = tls["services"]["tls-files"]["command"][0]
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    for name in re.search(r"for file in ([^;]+);", script).group(1).split():
        shutil.copy(data / "tls" / name, secrets / name)

    jvm_options = tuple(
        option.replace("/etc/kafka/secrets", str(secrets))
        for option in environment["KAFKA_OPTS"].split()
    )
    for port in (9093, 9094, 9095):
        assert f"{port}:{port}" in kafka["ports"]
    ports, broker = _compose_broker(broker_tool, environment, secrets, jvm_options)
    with broker:
        plain = f"127.0.0.1:{ports[9092]}"
        streams(
            "broker",
            "add-users",
            "--sasl-user",
            SASL_USER,
            "--bootstrap-servers",
            plain,
        )
        trust = {
            "kafka.ssl.truststore.location": str(data / "tls" / "ca.pem"),
            "kafka.ssl.truststore.type": "PEM",
        }
        key = {
            "kafka.ssl.keystore.location": str(data / "tls" / "client.p12"),
            "kafka.ssl.keystore.type": "PKCS12",
            "kafka.ssl.keystore.password": (
                data / "tls" / "store-password"
            ).read_text(),
        }
        login = {"username": SASL_USER, "password": SASL_PASSWORD}
        cases = {
            "SSL": (9093, {"security_protocol": "SSL", **trust}),
            "MTLS": (9094, {"security_protocol": "SSL", **trust, **key}),
            "SASL_SSL/PLAIN": (
                9095,
                {
                    "security_protocol": "SASL_SSL",
                    "sasl_mechanism": "PLAIN",
                    **trust,
                    **login,
                },
            ),
            "SASL_SSL/SCRAM-SHA-512": (
                9095,
                {
                    "security_protocol": "SASL_SSL",
                    "sasl_mechanism": "SCRAM-SHA-512",
                    **trust,
                    **login,
                },
            ),
        }
        for case, (port, credentials) in cases.items():
            servers = f"localhost:{ports[port]}"
            login_security = security.KafkaSecurity(credentials)
            assert security.connection_problem(servers, login_security) is None, case
            admin = KafkaAdminClient(
                bootstrap_servers=servers, **login_security.kafka_python()
            )
            try:
                assert isinstance(admin.list_topics(), list), case
            finally:
                admin.close()
        # Client certificates are asked for on MTLS only.
        assert "certificate" in security.connection_problem(
            f"localhost:{ports[9094]}",
            security.KafkaSecurity({"security_protocol": "SSL", **trust}),
        )
