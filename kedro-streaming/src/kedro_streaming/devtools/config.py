"""A project's configuration, read as ``kedro run --env <env>`` reads it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kedro_streaming._project import project_config  # noqa: F401 (its home)


def kafka_conf(env: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``kafka`` globals and the ``kafka`` credentials of ``conf/<env>``."""
    config = project_config(env)
    settings, credentials = (
        config["globals"].get("kafka") or {},
        config["credentials"].get("kafka") or {},
    )
    if not settings.get("bootstrap_servers"):
        raise ValueError(f"conf/{env}/globals.yml sets no kafka.bootstrap_servers")
    return settings, credentials


def input_root(env: str) -> Path:
    """Where ``conf/<env>`` reads landing files and the zone table from."""
    root = str(project_config(env)["globals"].get("input_root", "data/01_raw"))
    if "://" in root.removeprefix("file://"):
        raise ValueError(
            f"conf/{env} reads input from {root}: these tools write local folders "
            "only; copy the files there with your storage's own tools"
        )
    return Path(root.removeprefix("file://"))
