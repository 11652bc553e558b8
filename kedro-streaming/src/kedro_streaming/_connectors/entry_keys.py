"""The keys of a catalog entry: the plugin's own, misspelt ones, and secrets
(which belong in credentials and are never shown)."""

from __future__ import annotations

import difflib
from copy import deepcopy
from typing import Any

# Options that may carry secrets; shown as "***" in logs and `kedro catalog`.
# The plugin's own keys of save_args and load_args (a catalog entry's are
# SparkStreamingDataset's arguments, _ENTRY_KEYS): their other keys are
# Spark's options, which options.py checks.
_SAVE_KEYS = (
    "output_mode",
    "checkpoint",
    "trigger",
    "query_name",
    "partitionBy",
    "foreach_batch",
    "merge_on",
)


_LOAD_KEYS = ("schema", "keep_watermark")


# As close as difflib's ratio gets a typo of a plugin key (`checkpiont`:
# 0.9); no option name of Spark's formats comes this close to one.
_CLOSE = 0.8


# Spark's own spelling of a key the plugin takes under another name.
_SPARK_SPELLINGS = {"checkpointlocation": "checkpoint"}


_SECRET_MARKERS = ("jaas", "password", "secret", "keystore.key", "credentials")


def _is_secret(key: str) -> bool:
    return any(marker in key.lower() for marker in _SECRET_MARKERS)


def _close_key(key: str, keys: tuple[str, ...]) -> str | None:
    """The one of ``keys`` that ``key`` misspells (its case, Spark's name for
    it, or a typo), if any."""
    spelling = {known.lower(): known for known in keys}
    name = _SPARK_SPELLINGS.get(key.lower(), key.lower())
    close = difflib.get_close_matches(name, list(spelling), n=1, cutoff=_CLOSE)
    return spelling[close[0]] if close else None


def secrets_in(options: dict[str, Any], args_name: str) -> list[str]:
    """Secrets belong in credentials, which are never described or logged."""
    return [
        f"has the secret option '{key}' in its {args_name}: move it to an entry of "
        "conf/<env>/credentials.yml and name that entry with `credentials: <entry>`"
        for key in options
        if _is_secret(key)
    ]


def redact(options: dict[str, Any]) -> dict[str, Any]:
    shown = deepcopy(options)
    for key in shown:
        if _is_secret(key):
            shown[key] = "***"
    return shown


def unknown_key_problems(keys: list[str], entry_keys: tuple[str, ...]) -> list[str]:
    """A problem for each key an entry does not take, naming the key meant."""
    problems = []
    for key in keys:
        match = _close_key(key, entry_keys)
        nested = _close_key(key, _SAVE_KEYS) or _close_key(key, _LOAD_KEYS)
        if match:
            fix = f"did you mean `{match}`?"
        elif nested:
            args = "save_args" if nested in _SAVE_KEYS else "load_args"
            fix = f"did you mean `{args}: {{{nested}: ...}}`?"
        else:
            fix = "use " + ", ".join(entry_keys)
        problems.append(
            f"has `{key}`, which a SparkStreamingDataset entry does not take: {fix}"
        )
    return problems


def misspelt_args(
    load_args: dict[str, Any], writer_options: dict[str, Any]
) -> list[tuple[str, str, str]]:
    """(load_args or save_args, a key of it, the plugin's key it misspells).

    Example:
        >>> misspelt_args({}, {"checkpiont": "data/cp"})
        [('save_args', 'checkpiont', 'checkpoint')]
    """
    return [
        (args_name, key, match)
        for args_name, args, own in (
            ("load_args", load_args, _LOAD_KEYS),
            ("save_args", writer_options, _SAVE_KEYS),
        )
        for key in args
        if (match := _close_key(key, own)) and key != match
    ]
