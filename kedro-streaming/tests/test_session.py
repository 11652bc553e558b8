"""What a local run's Spark UI exposes, as configured before Spark starts."""

from __future__ import annotations

import pytest
from kedro_streaming import session


@pytest.fixture
def restored():
    """The module's settings as they were: other tests' session is built from them."""
    settings, address = dict(session._settings), list(session._ui_address)
    yield
    session._settings.clear()
    session._settings.update(settings)
    session._ui_address[:] = address


@pytest.mark.usefixtures("restored")
def test_spark_ui_on_this_machine_without_kill_links_unless_asked():
    session.configure_spark({"spark.master": "local[1]"}, {})
    assert session._settings["spark.ui.killEnabled"] == "false"
    assert session._ui_address == ["127.0.0.1"]

    session.configure_spark(
        {"spark.master": "local[1]"},
        {"spark_ui_address": "0.0.0.0", "spark_ui_kill_enabled": True},
    )
    assert session._settings["spark.ui.killEnabled"] == "true"
    assert session._ui_address == ["0.0.0.0"]

    # spark.yml's own setting wins.
    session.configure_spark(
        {"spark.master": "local[1]", "spark.ui.killEnabled": True},
        {"spark_ui_kill_enabled": False},
    )
    assert session._settings["spark.ui.killEnabled"] == "True"
