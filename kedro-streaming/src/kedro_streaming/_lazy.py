"""Public names imported on first use, from one mapping (name -> module).

``kedro catalog``, ``kedro viz`` and the commands that start no Spark do not
pay for PySpark's import; the modules that hold the names stay private.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping
from typing import Any


def attach(
    package: str, names: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """``__getattr__``, ``__dir__`` and ``__all__`` of a package whose public
    names live in the modules ``names`` maps them to (relative to it)."""
    public = sorted(names)

    def __getattr__(name: str) -> Any:  # noqa: N807 (a module's hook)
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module, package), name)

    def __dir__() -> list[str]:  # noqa: N807
        return public

    return __getattr__, __dir__, public


def moved(old: str, home: str) -> Callable[[str], Any]:
    """The ``__getattr__`` of a module that moved in 0.7.0: each of its names
    still resolves, for one minor version, with a ``DeprecationWarning``
    saying where to import it from (``kedro_streaming`` for a public name)."""

    def __getattr__(name: str) -> Any:  # noqa: N807 (a module's hook)
        public = importlib.import_module("kedro_streaming")
        if name in public.__all__:
            where, say = public, f"import {name} from kedro_streaming"
        else:
            where = importlib.import_module(home)
            if not hasattr(where, name) or name.startswith("__"):
                raise AttributeError(f"module {old!r} has no attribute {name!r}")
            say = f"{name} is private now ({home}) and may change without notice"
        warnings.warn(
            f"{old} is deprecated and goes in kedro-streaming 0.8.0: {say}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(where, name)

    return __getattr__
