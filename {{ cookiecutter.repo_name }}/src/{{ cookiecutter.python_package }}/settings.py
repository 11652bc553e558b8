"""Project settings. https://docs.kedro.org/en/stable/kedro_project_setup/settings.html"""

from pathlib import Path
from typing import Any

from kedro.config import MissingConfigException, OmegaConfigLoader

from {{ cookiecutter.python_package }}.hooks import SparkHooks, StreamingQueryHooks

# SparkHooks builds the SparkSession from spark.yml; StreamingQueryHooks runs the
# life of the streaming queries the pipelines start.
HOOKS = (SparkHooks(), StreamingQueryHooks())


class ConfigLoader(OmegaConfigLoader):
    """Kedro's loader, with secrets from conf/local in every environment.

    `kedro run --env kafka` reads conf/base and conf/kafka only; secrets belong
    in conf/local/credentials.yml (never committed), so they are added here.
    """

    def __getitem__(self, key: str) -> Any:
        if key != "credentials" or self.env == "local":
            return super().__getitem__(key)
        config = self._credentials_or_none(self) or {}
        if (Path(self.conf_source) / "local").is_dir():
            local = OmegaConfigLoader(
                conf_source=self.conf_source,
                env="local",
                base_env=self.base_env,
                default_run_env="local",
                config_patterns=self.config_patterns,
            )
            config = {**config, **(self._credentials_or_none(local) or {})}
        return config

    @staticmethod
    def _credentials_or_none(loader: OmegaConfigLoader) -> dict | None:
        try:
            return OmegaConfigLoader.__getitem__(loader, "credentials")
        except MissingConfigException:
            return None


CONFIG_LOADER_CLASS = ConfigLoader
CONFIG_LOADER_ARGS = {
    "base_env": "base",
    "default_run_env": "local",
    "config_patterns": {
        "spark": ["spark*", "spark*/**"],
    },
}
