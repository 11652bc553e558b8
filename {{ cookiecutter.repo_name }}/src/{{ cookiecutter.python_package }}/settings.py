"""Project settings. https://docs.kedro.org/en/stable/kedro_project_setup/settings.html"""

import warnings

from omegaconf.resolvers import oc

from {{ cookiecutter.python_package }}.hooks import HOOKS  # noqa: F401 (Kedro reads it here)

# Kedro's config loader uses OmegaConf 2.4's deprecated resolver call: Kedro's to fix.
warnings.filterwarnings(
    "ignore", message=r"register_new_resolver\(\) is deprecated", category=UserWarning
)

# `oc.env` everywhere, not only in credentials: a cluster environment takes its
# storage root and master URL from the deployment's variables. Secrets still
# belong in credentials.yml, which is never logged.
CONFIG_LOADER_ARGS = {
    "custom_resolvers": {"oc.env": oc.env},
    "base_env": "base",
    "default_run_env": "local",
    # An environment's parameters_expectations.yml can change one rule (or one
    # rule's action) without repeating the others.
    "merge_strategy": {"parameters": "soft"},
    # kedro-streaming's settings: spark.yml and streaming.yml.
    "config_patterns": {
        "spark": ["spark*", "spark*/**"],
        "streaming": ["streaming*", "streaming*/**"],
    },
}
