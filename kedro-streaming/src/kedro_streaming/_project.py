"""A project's configuration and catalog, read as ``kedro run --env <env>``
reads them: for the Kafka clients of a project's own code and the
development services."""

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
    """The ``globals``, ``credentials`` and ``spark`` settings of ``conf/<env>``.

    Read as ``kedro run --env <env>`` reads them: with the project's
    ``settings.py`` (its resolvers included) and ``conf/base`` beneath.
    The project is the working directory unless ``project_path`` is given.
    """
    with warnings.catch_warnings():
        # Kedro registers its resolvers with an API newer omegaconf deprecates.
        warnings.simplefilter("ignore", UserWarning)
        metadata, loader = _config_loader(env, project_path)
        config: dict[str, Any] = {"package_name": metadata.package_name}
        for key in ("globals", "credentials", "spark"):
            try:
                config[key] = loader[key] or {}
            except MissingConfigException:  # e.g. an environment without secrets
                config[key] = {}
    return config


def project_catalog(env: str, project_path: Path | None = None):
    """The catalog of ``conf/<env>``, as ``kedro run --env <env>`` builds it
    (its datasets made, none loaded)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        _, loader = _config_loader(env, project_path)
        try:
            credentials = loader["credentials"]
        except MissingConfigException:
            credentials = {}
        from kedro.framework.project import settings  # noqa: PLC0415 (see below)

        return settings.DATA_CATALOG_CLASS.from_config(
            catalog=loader["catalog"], credentials=credentials
        )


def _config_loader(env: str, project_path: Path | None):
    """The project's metadata and its config loader for ``conf/<env>``."""
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
    return metadata, loader


@contextlib.contextmanager
def _callers_logging():
    """Imports Kedro's project module, if not yet imported, without the
    logging configuration it applies then (the project's logging.yml: rich
    on stdout, where the dev tools print their results only, and where a
    script's own output goes): the caller's logging stays as it was."""
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
