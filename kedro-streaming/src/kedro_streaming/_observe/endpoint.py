"""The run's Prometheus endpoint: where streaming.yml puts it, served while
the queries run, and held a while after a continuous run's query failed."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from kedro_streaming._observe.metrics import StreamMetrics
from kedro_streaming.errors import StreamingConfigError

# The hooks' lines: projects' logging.yml may set this logger's level.
logger = logging.getLogger("kedro_streaming.queries")

POLL_SECONDS = 0.5
_PORTS = range(65536)  # 0: no endpoint


def metrics_endpoint(settings: dict[str, Any]) -> tuple[str, int]:
    """``metrics_address`` and ``metrics_port`` (0: no endpoint)."""
    address = str(settings.get("metrics_address", "127.0.0.1"))
    port = settings.get("metrics_port", 0)
    with contextlib.suppress(TypeError, ValueError):
        port = int(port)
    if not isinstance(port, int) or port not in _PORTS:
        raise StreamingConfigError(
            f"metrics_port '{port}' in streaming.yml is not a port: set a "
            "number from 1 to 65535, or 0 for no Prometheus endpoint."
        )
    return address, port


def serve_metrics(settings: dict[str, Any]) -> tuple[StreamMetrics | None, float]:
    """The run's Prometheus endpoint, unless ``metrics_port`` is 0, and how
    long to serve it after a failure (``metrics_serve_after_failure``)."""
    address, port = metrics_endpoint(settings)
    linger = settings.get("metrics_serve_after_failure", 0)
    try:
        serve_after_failure = float(linger)
    except (TypeError, ValueError):
        raise StreamingConfigError(
            f"metrics_serve_after_failure '{linger}' in streaming.yml is not a "
            "number of seconds: set one, or 0 to end a failed run at once."
        ) from None
    if port == 0:
        return None, serve_after_failure
    metrics = StreamMetrics()
    metrics.serve(
        address,
        port,
        tls={
            option: str(settings.get(f"metrics_tls_{option}") or "")
            for option in ("certfile", "keyfile", "client_cafile")
        },
    )
    logger.info(
        "Prometheus metrics of the streams: %s://%s:%d/metrics",
        metrics.scheme,
        address,
        port,
    )
    return metrics, serve_after_failure


def serve_the_failure(
    seconds: float, triggers: dict[str, dict[str, Any]], stopped: Callable[[], bool]
) -> None:
    """Serves the endpoint a while after a continuous run's query failed, for
    Prometheus to scrape the failed status; ``stopped()`` ends it sooner."""
    bounded = all("availableNow" in t for t in triggers.values())
    if seconds <= 0 or bounded:  # a bounded run is a job: its exit code tells
        return
    logger.info(
        "Serving the failed status on the Prometheus endpoint for %g s "
        "(Ctrl-C to end now; --params metrics_serve_after_failure=0 for none).",
        seconds,
    )
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not stopped():
        time.sleep(POLL_SECONDS)
