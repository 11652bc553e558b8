"""What a run prints: one line per event where nobody reads a terminal, and
a configuration error as its message, without a stack trace.

The hooks call these when a Kedro context is created, after the project's
``conf/logging.yml`` is in place.
"""

from __future__ import annotations

import logging
import sys
import warnings

from kedro_streaming.errors import StreamingConfigError, StreamingQueryFailed

# One event, one line: grep a progress line from a file or a CI log.
LINE_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def one_line_off_terminal() -> None:
    """Where nobody reads a terminal (a file, a pipe, a CI log), replaces
    the root logger's rich handlers by one that writes each event on one
    line: rich wraps at 80 columns there, a progress line over 4 to 7 lines.
    A terminal keeps rich's console."""
    if sys.stdout.isatty():
        return
    from rich.logging import RichHandler  # noqa: PLC0415 (Kedro's dependency)

    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler, RichHandler):
            plain = logging.StreamHandler(sys.stdout)
            plain.setLevel(handler.level)
            plain.setFormatter(logging.Formatter(LINE_FORMAT))
            root.removeHandler(handler)
            root.addHandler(plain)


def quiet_resolver_deprecation() -> None:
    """Hides OmegaConf 2.4's ``register_new_resolver() is deprecated``
    warning, which Kedro's configuration loader causes (three times at every
    command, the project's own resolvers included) and no project can act
    on. Other warnings stay."""
    warnings.filterwarnings(
        "ignore",
        message=r"register_new_resolver\(\) is deprecated",
        category=UserWarning,
    )


def short_config_errors() -> None:
    """Prints a configuration error, or a failed query, as its message
    without the stack trace: the message names the cause and the fix (a
    failed query's names Spark's reason); the trace would show the runtime's
    own code and py4j's. Any other error keeps its trace."""
    previous = sys.excepthook
    if getattr(previous, "short_config_errors", False):
        return

    def excepthook(kind, error, trace) -> None:
        if isinstance(error, StreamingConfigError | StreamingQueryFailed):
            print(f"{kind.__name__}: {error}", file=sys.stderr)  # noqa: T201
            return
        previous(kind, error, trace)

    excepthook.short_config_errors = True
    sys.excepthook = excepthook
