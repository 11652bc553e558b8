"""Project settings. https://docs.kedro.org/en/stable/kedro_project_setup/settings.html"""

from {{ cookiecutter.python_package }}.streaming import SparkHooks, StreamingQueryHooks

# SparkHooks reads spark.yml and starts the SparkSession when a pipeline runs;
# StreamingQueryHooks runs the life of the streaming queries the pipelines start.
HOOKS = (SparkHooks(), StreamingQueryHooks())

CONFIG_LOADER_ARGS = {
    "base_env": "base",
    "default_run_env": "local",
    "config_patterns": {
        "spark": ["spark*", "spark*/**"],
        "streaming": ["streaming*", "streaming*/**"],
    },
}
