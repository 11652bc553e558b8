"""Public names imported on first use, from one mapping (name -> module).

``kedro catalog``, ``kedro viz`` and the commands that start no Spark do not
pay for PySpark's import; the modules that hold the names stay private.
"""

from __future__ import annotations

import importlib
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
