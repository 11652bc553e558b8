"""Project settings. https://docs.kedro.org/en/stable/kedro_project_setup/settings.html"""

from {{ cookiecutter.python_package }}.hooks import SparkHooks, StreamingQueryHooks

# SparkHooks builds the SparkSession from spark.yml; StreamingQueryHooks runs the
# life of the streaming queries the pipelines start.
HOOKS = (SparkHooks(), StreamingQueryHooks())

# Disable the telemetry plugin's prompt in non-interactive runs, if installed.
# DISABLE_HOOKS_FOR_PLUGINS = ("kedro-telemetry",)

from kedro.config import OmegaConfigLoader  # noqa: E402

CONFIG_LOADER_CLASS = OmegaConfigLoader
CONFIG_LOADER_ARGS = {
    "base_env": "base",
    "default_run_env": "local",
    "config_patterns": {
        "spark": ["spark*", "spark*/**"],
    },
}
