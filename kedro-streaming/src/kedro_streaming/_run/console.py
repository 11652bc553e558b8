"""What a run prints: one line per event where nobody reads a terminal, and
a configuration error as its message, without a stack trace.

Both change the process (the root logger's handlers, ``sys.excepthook``):
the hooks apply them when a run starts, after the project's
``conf/logging.yml`` is in place, and undo them when it ends, so that
``kedro viz``, ``kedro catalog`` or a notebook keep their own.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

from kedro_streaming.errors import StreamingConfigError, StreamingQueryFailed

# One event, one line: grep a progress line from a file or a CI log.
LINE_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def one_line_off_terminal() -> Callable[[], None]:
    """Where nobody reads a terminal (a file, a pipe, a CI log), replaces
    the root logger's rich handlers by one that writes each event on one
    line: rich wraps at 80 columns there, a progress line over 4 to 7 lines.
    A terminal keeps rich's console. Returns what puts the rich ones back."""
    if sys.stdout.isatty():
        return _nothing
    from rich.logging import RichHandler  # noqa: PLC0415 (Kedro's dependency)

    root = logging.getLogger()
    plain_for: dict[logging.Handler, logging.Handler] = {}
    for handler in root.handlers:
        if isinstance(handler, RichHandler):
            plain = logging.StreamHandler(sys.stdout)
            plain.setLevel(handler.level)
            plain.setFormatter(logging.Formatter(LINE_FORMAT))
            plain_for[handler] = plain
    # In place: each plain handler where its rich one was, and back.
    root.handlers[:] = [plain_for.get(h, h) for h in root.handlers]
    rich_for = {plain: rich for rich, plain in plain_for.items()}

    def put_back() -> None:
        # Where the project's code removed a plain one meanwhile, none.
        root.handlers[:] = [rich_for.get(h, h) for h in root.handlers]

    return put_back


def run_console() -> Callable[[bool], None]:
    """Both, for a run, and what ends them: ``end(failed)``."""
    put_back_handlers = one_line_off_terminal()
    end_short_errors = short_config_errors()

    def end(failed: bool) -> None:
        put_back_handlers()
        end_short_errors(failed)

    return end


class _ShortErrors:
    """``sys.excepthook`` while a run may end in one of its errors."""

    def __init__(self, previous: Callable[..., Any]) -> None:
        self.previous = previous
        self.armed = True

    def __call__(self, kind, error, trace) -> None:
        if self.armed and isinstance(
            error, StreamingConfigError | StreamingQueryFailed
        ):
            print(f"{kind.__name__}: {error}", file=sys.stderr)  # noqa: T201
            return
        self.previous(kind, error, trace)


def short_config_errors() -> Callable[[bool], None]:
    """Prints a configuration error, or a failed query, as its message
    without the stack trace: the message names the cause and the fix (a
    failed query's names Spark's reason); the trace would show the runtime's
    own code and py4j's. Any other error keeps its trace.

    Returns the run's end: ``end(failed=False)`` puts the previous hook
    back; after a failure it stays, as Python prints the run's error only
    once the run is over (at exit), and passes any other error on."""
    hook = sys.excepthook
    if not isinstance(hook, _ShortErrors):  # else a failed run's, still there
        hook = _ShortErrors(hook)
        sys.excepthook = hook
    hook.armed = True

    def end(failed: bool) -> None:
        if failed:
            return
        hook.armed = False  # a pass-through if another hook wraps it now
        if sys.excepthook is hook:
            sys.excepthook = hook.previous

    return end


def _nothing() -> None:
    pass
