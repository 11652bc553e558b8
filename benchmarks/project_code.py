"""A generated project's own code and configuration, for the scripts that
run its plan by hand (``handwritten.py --plan project``,
``handwritten_realtime.py``)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

from kedro.config import OmegaConfigLoader


def node_modules(project: Path, *pipelines: str) -> list[ModuleType]:
    """The ``nodes`` module of each of the project's ``pipelines``."""
    package = next((project / "src").glob("*/pipelines")).parent.name
    sys.path.insert(0, str(project / "src"))
    return [
        importlib.import_module(f"{package}.pipelines.{name}.nodes")
        for name in pipelines
    ]


def config_loader(project: Path, env: str = "local") -> OmegaConfigLoader:
    """The project's configuration for ``env``, its ${...} resolved as Kedro's
    loader does (``loader["parameters"]``, ``loader["globals"]``)."""
    return OmegaConfigLoader(
        str(project / "conf"), base_env="base", default_run_env=env
    )
