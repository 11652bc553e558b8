"""The metrics endpoint over HTTPS, with client certificates required."""

from __future__ import annotations

import ssl
import urllib.request

import pytest
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
)
from kedro_streaming._connectors.kafka import kafka_lag
from kedro_streaming._run.metrics import StreamMetrics
from kedro_streaming.devtools.certificates import CertificateAuthority
from kedro_streaming.errors import StreamingConfigError


def test_metrics_over_tls_only_to_clients_with_a_certificate(tmp_path):
    ca = CertificateAuthority.new()
    ca_file = tmp_path / "ca.pem"
    ca_file.write_bytes(ca.certificate.public_bytes(Encoding.PEM))
    files = {}
    for name, (key, certificate) in {
        "server": ca.issue("localhost", hosts=("localhost", "127.0.0.1")),
        "client": ca.issue("prometheus", client=True),
    }.items():
        files[f"{name}_key"] = tmp_path / f"{name}-key.pem"
        files[f"{name}_key"].write_bytes(
            key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
        )
        files[f"{name}_cert"] = tmp_path / f"{name}.pem"
        files[f"{name}_cert"].write_bytes(certificate.public_bytes(Encoding.PEM))

    metrics = StreamMetrics()
    metrics.serve(
        "127.0.0.1",
        0,
        tls={
            "certfile": str(files["server_cert"]),
            "keyfile": str(files["server_key"]),
            "client_cafile": str(ca_file),
        },
    )
    try:
        url = f"https://localhost:{metrics.port}/metrics"
        assert metrics.scheme == "https"
        client = ssl.create_default_context(cafile=ca_file)
        with pytest.raises(OSError):  # no client certificate: refused
            urllib.request.urlopen(url, context=client, timeout=5).read()
        client.load_cert_chain(files["client_cert"], files["client_key"])
        body = urllib.request.urlopen(url, context=client, timeout=5).read().decode()
        assert "kedro_stream_" in body
    finally:
        metrics.close()

    with pytest.raises(StreamingConfigError, match="needs both metrics_tls_certfile"):
        StreamMetrics().serve("127.0.0.1", 0, tls={"certfile": str(ca_file)})


def test_kafka_lag_is_known_only_when_the_latest_offsets_were_read_after_the_batch():
    micro_batch = {
        "description": "KafkaV2[Subscribe[trips]]",
        "endOffset": {"trips": {"0": 120, "1": 80}},
        "latestOffset": {"trips": {"0": 150, "1": 80}},
    }
    assert kafka_lag(micro_batch) == {"trips": {"0": 30, "1": 0}}
    # Real-Time Mode: the latest offsets are the batch's start; its tasks
    # read past them, and the difference is not a lag.
    real_time = {**micro_batch, "latestOffset": {"trips": {"0": 100, "1": 80}}}
    assert kafka_lag(real_time) is None
    assert kafka_lag({**micro_batch, "description": "FileStreamSource[x]"}) is None
