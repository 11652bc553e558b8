"""Data-quality expectations: named Spark SQL rules from configuration, each
with an action (``warn``, ``quarantine``, ``fail``), checked on every record
and counted per rule in every micro-batch. As in SQL ``CHECK`` constraints,
a rule is broken only when false, not null."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType

from kedro_streaming._nodes.records import record_origin, sql_name
from kedro_streaming._spark import pyspark_error_logs_off
from kedro_streaming.errors import StreamingConfigError
from kedro_streaming.problems import did_you_mean

ACTIONS = ("warn", "quarantine", "fail")
# The observed metric: one count per rule, and these totals.
EXPECTATIONS_METRIC = "expectations"
QUARANTINED = "quarantined"  # records with a rejection reason, whatever it is
WARNED = "warned"  # records kept with at least one warning
UNPARSED = "unparsed"  # records rejected before the rules (see `problems`)
# The column of problems parse_records gives each record.
PARSE_PROBLEMS = "problems"
_RESERVED = (QUARANTINED, WARNED, UNPARSED)
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


@dataclass(frozen=True)
class Expectation:
    """One rule: a record is good when ``expect`` is not false."""

    name: str
    expect: str
    action: str


def expectations_from_config(
    config: Mapping[str, Any], declared_in: str
) -> list[Expectation]:
    """The rules of a ``{name: {expect: ..., action: ...}}`` mapping, checked;
    ``declared_in`` names where, for the messages."""
    if not isinstance(config, Mapping) or not config:
        raise StreamingConfigError(
            f"{declared_in} declares no expectations: give a mapping of rule "
            "names to {expect: <Spark SQL boolean expression>, action: warn | "
            "quarantine | fail}."
        )
    expectations = []
    for name, rule in config.items():
        where = f"expectation '{name}' ({declared_in})"
        if not isinstance(name, str) or not _NAME.match(name) or name in _RESERVED:
            raise StreamingConfigError(
                f"{where}: a rule's name is its metric's name; use lower-case "
                f"letters, digits and _, and none of {', '.join(_RESERVED)}."
            )
        if not isinstance(rule, Mapping) or set(rule) - {"expect", "action"}:
            raise StreamingConfigError(
                f"{where}: give exactly `expect` and `action`, not "
                f"{sorted(rule) if isinstance(rule, Mapping) else repr(rule)}."
            )
        expect, action = rule.get("expect"), rule.get("action")
        if not isinstance(expect, str) or not expect.strip():
            raise StreamingConfigError(
                f"{where}: `expect` must be a Spark SQL boolean expression "
                "that a good record satisfies, e.g. `<column> >= 0` or `<column> IS NOT NULL`."
            )
        if action not in ACTIONS:
            fix = did_you_mean(str(action), ACTIONS)
            raise StreamingConfigError(
                f"{where}: action {action!r} is not one of {', '.join(ACTIONS)}"
                + (f": {fix}" if fix else ".")
            )
        expectations.append(Expectation(name, expect.strip(), action))
    return expectations


def check_expectations(  # noqa: PLR0913
    records: DataFrame,
    config: Mapping[str, Any],
    *,
    declared_in: str = "the rules given to check_expectations",
    origin: Column | None = None,
    problems: str | None = PARSE_PROBLEMS,
    reason_column: str = "rejection_reason",
    warnings_column: str = "warnings",
) -> DataFrame:
    """Checks every record against the rules of ``config``
    (``{name: {expect: ..., action: ...}}``), batch or streaming.

    A rule that does not parse, names a missing column or is no boolean fails
    here, before any query starts. ``origin`` names a record in a ``fail``
    rule's message (default: ``record_origin``). A record with ``problems``
    (``parse_records``' column, where there is one; ``None``: none read) is
    quarantined with them, unchecked. The result is ``records``' columns
    (less ``problems``), ``reason_column`` and ``warnings_column`` (the
    ``; ``-joined names of the rules broken, else null); each micro-batch
    observes the metric ``expectations``: the records each rule caught,
    ``quarantined``, ``warned`` and ``unparsed``.

    Example:
        >>> from kedro_streaming import check_expectations
        >>> rules = {
        ...     "plausible": {"expect": "temperature_c < 60", "action": "quarantine"}
        ... }
        >>> readings = spark.createDataFrame(
        ...     [("d1", 21.5), ("d2", 99.0)], "device STRING, temperature_c DOUBLE"
        ... )
        >>> check_expectations(readings, rules).collect()
        [Row(device='d1', temperature_c=21.5, rejection_reason=None, warnings=None),
         Row(device='d2', temperature_c=99.0, rejection_reason='plausible',
             warnings=None)]
    """
    expectations = expectations_from_config(config, declared_in)
    _check_rules(records, expectations, declared_in)
    columns = records.columns
    problems = _problems_column(columns, problems, declared_in)
    if origin is None:
        origin = record_origin(records)
    # The checks are written as SQL, as the rules are: a Column built in
    # Python costs a call into the JVM per function and operator, and 32 rules
    # built that way took longer than Spark's analysis of the whole plan.
    flags = {e.name: f"_broken_{i}" for i, e in enumerate(expectations)}
    parsed = f"{sql_name(problems)} IS NULL AND " if problems else ""
    # Each rule computed once per record, as a flag the counts and the
    # reasons read. The counts are observed on the flags themselves, and the
    # reasons joined after: one projection fewer to plan, which Real-Time Mode
    # does again at every checkpoint.
    flagged = records.selectExpr(
        "*",
        *[
            f"{parsed}NOT coalesce(({e.expect}\n), true) AS {flags[e.name]}"
            for e in expectations
        ],
    )
    unparsed = f"{sql_name(problems)} IS NOT NULL" if problems else "false"
    # What the joined reasons and warnings below are not empty for.
    quarantined = [
        *([f"coalesce({sql_name(problems)} != '', false)"] if problems else []),
        *(flags[e.name] for e in expectations if e.action == "quarantine"),
    ]
    warned = [flags[e.name] for e in expectations if e.action == "warn"]
    counted = {
        QUARANTINED: " OR ".join(quarantined) or "false",
        WARNED: " OR ".join(warned) or "false",
        UNPARSED: unparsed,
        **flags,
    }
    # The names are plain (rule names are checked): no quoting needed.
    observed = flagged.observe(
        EXPECTATIONS_METRIC,
        *[F.expr(f"count_if({counts}) AS {name}") for name, counts in counted.items()],
    )
    given = [sql_name(problems)] if problems else []
    reasons = _joined([*given, *_broken(expectations, flags, "quarantine")])
    warnings = _joined(_broken(expectations, flags, "warn"))
    kept = [sql_name(c) for c in columns if c != problems]
    warnings_output = f"nullif({warnings}, '') AS {sql_name(warnings_column)}"
    failures = _failures(expectations, flags, origin, declared_in)
    if not failures:
        reason_output = f"nullif({reasons}, '') AS {sql_name(reason_column)}"
        return observed.selectExpr(*kept, reason_output, warnings_output)
    # raise_error in an output column: a pruned column would never fail.
    failing = F.concat_ws("; ", F.expr(reasons), *failures)
    return observed.select(
        *map(F.expr, kept),
        F.nullif(failing, F.lit("")).alias(reason_column),
        F.expr(warnings_output),
    )


def _problems_column(
    columns: list[str], problems: str | None, declared_in: str
) -> str | None:
    """The column of problems found before the rules: the default only where
    the records have it."""
    if problems is None or problems in columns:
        return problems
    if problems == PARSE_PROBLEMS:
        return None
    raise StreamingConfigError(
        f"{declared_in}: check_expectations' column of problems {problems!r} is "
        f"not a column of the records; they have {', '.join(columns)}."
    )


def _broken(expectations: list, flags: dict[str, str], action: str) -> list[str]:
    """``CASE`` expressions naming each broken rule with ``action``."""
    return [
        f"CASE WHEN {flags[e.name]} THEN '{e.name}' END"
        for e in expectations
        if e.action == action
    ]


def _failures(
    expectations: list, flags: dict[str, str], origin: Column, declared_in: str
) -> list[Column]:
    """A column per ``fail`` rule that stops the query when the rule breaks,
    naming the rule, the record's origin and the fix."""
    fix = (
        f"Correct the record at its source, or change the rule or its action in "
        f"{declared_in}; then run again: the query resumes at this micro-batch, "
        "which was not committed."
    )
    return [
        F.when(
            F.col(flags[e.name]),
            F.raise_error(
                F.concat(
                    F.lit(f"Expectation '{e.name}' failed (action: fail) on "),
                    origin,
                    F.lit(f". {fix}"),
                )
            ),
        )
        for e in expectations
        if e.action == "fail"
    ]


def _joined(texts: list[str]) -> str:
    """SQL: the non-null values of SQL expressions ``texts``, ``; ``-joined."""
    return f"concat_ws('; ', {', '.join(texts)})" if texts else "''"


def rule_counts(metrics: Mapping[str, Any]) -> dict[str, int]:
    """The per-rule counts of an observed ``expectations`` metric row."""
    return {k: int(v) for k, v in metrics.items() if k not in _RESERVED}


def _check_rules(
    records: DataFrame, expectations: list[Expectation], declared_in: str
) -> None:
    """Analyses the rules against ``records``' columns; each must be a boolean.

    In one pass (about 20 ms a rule otherwise); only when it fails is each
    rule analysed on its own, to name the one that is wrong.
    """
    try:
        with pyspark_error_logs_off():
            # A line break before the parenthesis ends a rule's -- comment.
            kinds = records.selectExpr(
                *[f"({e.expect}\n) AS _rule_{i}" for i, e in enumerate(expectations)]
            ).schema
    except AnalysisException:  # ParseException is one
        kinds = None
    if kinds is None or len(kinds) != len(expectations):
        # Not one boolean column per rule (a rule with a parse error, a
        # missing column, or a `)` that ends it early): find the rule.
        for expectation in expectations:
            _check_alone(records, expectation, declared_in)
        raise StreamingConfigError(
            f"{declared_in}: the rules cannot be checked together, though each "
            "can on its own; check them for unbalanced parentheses."
        )
    for expectation, kind in zip(expectations, kinds, strict=True):
        if not isinstance(kind.dataType, BooleanType):
            raise StreamingConfigError(
                f"{_where(expectation, declared_in)}: `{expectation.expect}` is a "
                f"{kind.dataType.simpleString()}, not a boolean: write a condition "
                "that a good record satisfies, e.g. `<column> >= 0` or `<column> IS NOT NULL`."
            )


def _check_alone(
    records: DataFrame, expectation: Expectation, declared_in: str
) -> None:
    try:
        with pyspark_error_logs_off():
            rule = F.expr(expectation.expect)
            records.select(rule.alias("rule")).schema  # noqa: B018 (analyses it)
    except AnalysisException as error:  # ParseException is one
        message = str(error).strip().splitlines()[0]
        raise StreamingConfigError(
            f"{_where(expectation, declared_in)}: `{expectation.expect}` cannot be "
            f"checked: {message}. Fix the expression; it can use the record's "
            f"columns: {', '.join(records.columns)}."
        ) from None


def _where(expectation: Expectation, declared_in: str) -> str:
    return f"expectation '{expectation.name}' ({declared_in})"
