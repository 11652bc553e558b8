"""The metrics endpoint over HTTPS, with client certificates required; the
figures of the moment of a scrape."""

from __future__ import annotations

import ssl
import urllib.request

import pytest
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
)
from kedro_streaming._connectors.kafka.connector import kafka_lag
from kedro_streaming._observe.metrics import StreamMetrics, _AtScrape
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


BUSY = {"isTriggerActive": True, "isDataAvailable": True}
IDLE = {"isTriggerActive": False, "isDataAvailable": False}


@pytest.mark.parametrize(
    ("looks", "now", "seconds"),
    [
        pytest.param([(105, BUSY), (120, BUSY)], 130, 30, id="stalled-since-its-batch"),
        pytest.param(
            [(105, IDLE), (500, IDLE), (501, BUSY)], 503, 3, id="first-batch-after-idle"
        ),
        pytest.param([(105, BUSY), (530, IDLE)], 530, 0, id="idle-now"),
        pytest.param(
            [(60, IDLE)], 130, 30, id="idle-before-its-batch-counts-from-the-batch"
        ),
    ],
)
def test_time_without_progress_counts_from_the_last_batch_or_idle_look(
    looks, now, seconds
):
    """Its last batch ended at 100 (Unix time); the run then saw Spark's status
    of the query at the given times. A query idle for want of input, then
    running its first batch, is not stalled for the time since its last
    batch."""
    at_scrape = _AtScrape({"q": 100.0}, {})
    for at, status in looks:
        at_scrape.look("q", status, at)
    assert at_scrape.seconds_without_progress("q", now) == seconds
