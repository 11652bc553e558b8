"""The ``[dev]`` extra of kedro-streaming: what only the development services
need. A production install (``pip install kedro-streaming``) goes without it,
so its commands check for it before they import anything of theirs."""

from __future__ import annotations

import importlib

import click

MISSING = (
    "the development services need kedro-streaming[dev]: "
    'pip install "kedro-streaming[dev]"'
)

# The commands of the development services (``cli.main``), which
# ``kedro streams`` mounts.
COMMANDS = ("broker", "registry", "cluster", "connect", "submit", "send", "watch")

# The modules of the extra's distributions (pyproject.toml, ``dev``).
DEV_MODULES = ("fastavro",)


def missing_modules() -> list[str]:
    """The modules of the ``[dev]`` extra that do not import."""
    missing = []
    for name in DEV_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    return missing


def services() -> click.Group:
    """The development services' commands (:func:`.cli.main`), imported now.

    Without the ``[dev]`` extra, exits 1 with one line saying how to install it.
    """
    if missing_modules():
        click.echo(MISSING, err=True)
        raise SystemExit(1)
    from kedro_streaming.devtools.cli import main  # noqa: PLC0415 (checked first)

    return main
