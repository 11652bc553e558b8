"""A project's configuration and catalog, read as ``kedro run --env <env>``
reads them (for a project's own Kafka clients and the dev services)."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

from kedro.config import MissingConfigException


def project_config(env: str, project_path: Path | None = None) -> dict[str, Any]:
    """The ``globals``, ``credentials`` and ``spark`` settings of ``conf/<env>``
    of the project at ``project_path`` (default: the working directory)."""
    with warnings.catch_warnings():
        # Kedro registers its resolvers with an API newer omegaconf deprecates.
        warnings.simplefilter("ignore", UserWarning)
        metadata, loader, _ = _config_loader(env, project_path)
        config: dict[str, Any] = {"package_name": metadata.package_name}
        for key in ("globals", "credentials", "spark"):
            config[key] = _optional(loader, key)
    return config


def project_catalog(env: str, project_path: Path | None = None):
    """The catalog of ``conf/<env>`` (its datasets made, none loaded)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        _, loader, settings = _config_loader(env, project_path)
        return settings.DATA_CATALOG_CLASS.from_config(
            catalog=loader["catalog"], credentials=_optional(loader, "credentials")
        )


def _optional(loader: Any, key: str) -> Any:
    try:
        return loader[key] or {}
    except MissingConfigException:  # e.g. an environment without secrets
        return {}


def _config_loader(env: str, project_path: Path | None):
    """The project's metadata, config loader for ``conf/<env>``, and settings."""
    with _callers_logging():
        from kedro.framework.project import (  # noqa: PLC0415
            settings as project_settings,
        )
        from kedro.framework.startup import bootstrap_project  # noqa: PLC0415

    metadata = bootstrap_project(Path(project_path or Path.cwd()))
    loader = project_settings.CONFIG_LOADER_CLASS(
        conf_source=str(metadata.project_path / project_settings.CONF_SOURCE),
        env=env,
        **project_settings.CONFIG_LOADER_ARGS,
    )
    return metadata, loader, project_settings


@contextlib.contextmanager
def _callers_logging():
    """Imports Kedro's project module, if not yet imported, without the
    logging configuration it applies then (rich on stdout, where the dev
    tools print their results): the caller's logging stays as it was."""
    if "kedro.framework.project" in sys.modules:  # Kedro's CLI: already set up
        yield
        return
    with tempfile.TemporaryDirectory(prefix="kedro-streaming-") as folder:
        unchanged = Path(folder) / "logging.yml"
        unchanged.write_text("version: 1\ndisable_existing_loggers: false\n")
        previous = os.environ.get("KEDRO_LOGGING_CONFIG")
        os.environ["KEDRO_LOGGING_CONFIG"] = str(unchanged)
        try:
            with contextlib.redirect_stdout(sys.stderr):
                yield
        finally:
            if previous is None:
                os.environ.pop("KEDRO_LOGGING_CONFIG")
            else:
                os.environ["KEDRO_LOGGING_CONFIG"] = previous
