"""Commands this project adds to Kedro's: `kedro streams status|validate|reset`.

Kedro finds the ``cli`` group of this module; see
https://docs.kedro.org/en/stable/extend/common_use_cases.html
"""

import click

from {{ cookiecutter.python_package }}.streaming.commands import streams


@click.group(name="{{ cookiecutter.python_package }}")
def cli() -> None:
    """Commands of this project."""


cli.add_command(streams)
