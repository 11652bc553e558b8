"""Commands this project adds to Kedro's: `kedro streams status|validate|reset`.

Kedro finds the ``cli`` group of this module; see
https://docs.kedro.org/en/stable/extend/common_use_cases.html
"""

import click

# Kedro's own `run`, unchanged: `python -m {{ cookiecutter.python_package }}` and a packaged
# project (`kedro package`, spark-submit) look for `run` in this module.
from kedro.framework.cli.project import run

from {{ cookiecutter.python_package }}.streaming.commands import streams

__all__ = ["cli", "run"]


@click.group(name="{{ cookiecutter.python_package }}")
def cli() -> None:
    """Commands of this project."""


cli.add_command(streams)
