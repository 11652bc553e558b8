"""The plugin's tests take no fixed port: each takes a free one (bind to
port 0). To prove it, the session holds the default ports of a project's
services (``DEFAULT_PORTS``: Kafka's 9092-9095, metrics 9464, Spark UI 4040,
registry 8081, Spark's 7077 and 15002), those of them free when it starts,
bound and listening throughout: a test that takes one fails."""

from __future__ import annotations

import pytest
from kedro_streaming.devtools.processes import DEFAULT_PORTS, hold_ports


@pytest.fixture(scope="session", autouse=True)
def default_ports_held():
    with hold_ports(DEFAULT_PORTS) as held:
        yield held
