"""The keys of a catalog entry: the plugin's own, misspelt ones, and secrets
(which belong in credentials and are never shown)."""

from __future__ import annotations

from copy import deepcopy
from typing import Any

from kedro_streaming.problems import TYPO, Problem, closest

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
    "changes",
)


_LOAD_KEYS = ("schema", "keep_watermark")


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
    close = closest(name, spelling, cutoff=TYPO)
    return close[0] if close else None


def secrets_in(options: dict[str, Any], args_name: str) -> list[Problem]:
    """Secrets belong in credentials, which are never described or logged."""
    return [
        Problem(
            f"has the secret option '{key}' in its {args_name}",
            "move it to an entry of conf/<env>/credentials.yml and name that entry "
            "with `credentials: <entry>`",
            id="ENTRY_SECRET_OUTSIDE_CREDENTIALS",
        )
        for key in options
        if _is_secret(key)
    ]


def credentials_unread(connector: Any, credentials: dict[str, Any]) -> list[Problem]:
    """Credentials on an entry whose connector has no client to give them to."""
    if not credentials or connector.client_prefix:
        return []
    return [
        Problem(
            f"has credentials, which a {connector.label} entry does not read",
            "remove them: credentials are a Kafka entry's (a schema registry's "
            "go in its `avro` option)",
            id="ENTRY_CREDENTIALS_UNREAD",
        )
    ]


def redact(options: dict[str, Any]) -> dict[str, Any]:
    shown = deepcopy(options)
    for key in shown:
        if _is_secret(key):
            shown[key] = "***"
    return shown


def entry_problems(
    unknown: list[str],
    entry_keys: tuple[str, ...],
    load_args: dict[str, Any],
    writer_options: dict[str, Any],
    keep_watermark: Any,
) -> list[Problem]:
    """Each key an entry does not take, each key of its load_args and
    save_args that is not the plugin's but close to one of its keys
    (``checkpiont``: Spark would take it for an option and ignore it), and a
    ``keep_watermark`` that is not a boolean. Other unknown keys of those are
    Spark's to check."""
    return (
        unknown_key_problems(unknown, entry_keys)
        + [
            Problem(
                f"has `{key}` in its {args_name}",
                f"did you mean `{match}`?",
                id="ENTRY_KEY_MISSPELT",
            )
            for args_name, key, match in misspelt_args(load_args, writer_options)
        ]
        + (
            []
            if isinstance(keep_watermark, bool)
            else [
                Problem(
                    f"has `keep_watermark: {keep_watermark}` in its load_args",
                    "use true or false",
                    id="ENTRY_KEEP_WATERMARK_NOT_BOOLEAN",
                )
            ]
        )
    )


def unknown_key_problems(keys: list[str], entry_keys: tuple[str, ...]) -> list[Problem]:
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
            Problem(
                f"has `{key}`, which a SparkStreamingDataset entry does not take",
                fix,
                id="ENTRY_KEY_UNKNOWN",
            )
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
