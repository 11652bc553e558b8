"""``kedro streams state``: what a sink's query keeps in its state, read from
its checkpoint (Spark's state data source), as a table or JSON lines."""

from __future__ import annotations

import json
import logging
from typing import Any

import click
from kedro.framework.cli.utils import env_option
from pyspark.errors import AnalysisException

from kedro_streaming._cli.project import _open, streaming_sink
from kedro_streaming._observe.state_contents import (
    JOIN,
    StateOperator,
    readable,
    state_operators,
    state_rows,
)
from kedro_streaming._session.session import spark_session
from kedro_streaming._spark import headline, pyspark_error_logs_off

# Rows a table shows unless --limit says otherwise.
_SHOWN = 20


@click.command()
@click.argument("sink")
@env_option
@click.option("--operator", type=int, help="The stateful operator's id (0, 1...).")
@click.option(
    "--part", help="A join's side (left, right) or a transformWithState variable."
)
@click.option("--batch", type=int, help="The state after this batch (the last).")
@click.option("--since", type=int, help="What changed after this batch, up to --batch.")
@click.option("--timers", is_flag=True, help="transformWithState's timers.")
@click.option("--where", help="A SQL condition on the columns shown.")
@click.option("--limit", type=int, help=f"Rows at most (a table: {_SHOWN}).")
@click.option("--json", "as_json", is_flag=True, help="JSON lines, not a table.")
@click.pass_obj
def state(metadata, *, sink: str, env: str | None, **options: Any) -> None:
    """What SINK's query keeps in its state, from its checkpoint.

    Without --operator: each stateful operator, its parts and batches. With
    it: its rows by key at a batch, or (--since) what changed between two.
    Reads only: the query may be running.
    """
    if options["as_json"]:  # stdout is the rows' alone: Kedro's own lines go
        logging.disable(logging.INFO)
    try:
        _show(_checkpoint_of(metadata, env, sink), sink, **options)
    finally:
        logging.disable(logging.NOTSET)


def _show(  # noqa: PLR0913 (the command's options)
    checkpoint: str,
    sink: str,
    *,
    operator: int | None,
    part: str | None,
    batch: int | None,
    since: int | None,
    timers: bool,
    where: str | None,
    limit: int | None,
    as_json: bool,
) -> None:
    spark = spark_session()
    operators = state_operators(spark, checkpoint)
    if not operators:
        raise click.ClickException(
            f"'{sink}' keeps no state: its checkpoint has no stateful operator."
        )
    if operator is None:
        for each in operators:
            click.echo(_describe(each))
        return
    chosen = next((o for o in operators if o.id == operator), None)
    if chosen is None:
        raise click.ClickException(
            f"'{sink}' has no stateful operator {operator}: "
            f"{', '.join(str(o.id) for o in operators)}."
        )
    if part is None and chosen.parts != (None,) and not timers:
        part = chosen.parts[0]
        click.echo(
            f"({chosen.name} {chosen.id}: {part}; --part for the others)", err=True
        )
    with readable(checkpoint) as location:
        rows = state_rows(
            spark, location, chosen, part=part, batch=batch, since=since, timers=timers
        )
        _print(_where(rows, where), limit, as_json)


def _where(rows: Any, where: str | None) -> Any:
    if where:
        try:
            with pyspark_error_logs_off():
                rows = rows.where(where)
        except AnalysisException as error:
            raise click.ClickException(
                f"--where {where!r}: {headline(error)}. The columns: "
                f"{', '.join(f'`{c}`' for c in rows.columns)}."
            ) from None
    return rows


def _checkpoint_of(metadata, env: str | None, sink: str) -> str:
    return streaming_sink(_open(metadata, env, []), sink).checkpoint


def _describe(operator: StateOperator) -> str:
    parts = ", ".join(p for p in operator.parts if p)
    kind = "sides" if operator.name == JOIN else "variables"
    return (
        f"operator {operator.id}: {operator.name}, {operator.partitions} partitions, "
        f"batches {operator.first_batch} to {operator.last_batch}"
        + (f" ({kind}: {parts})" if parts else "")
    )


def _print(rows: Any, limit: int | None, as_json: bool) -> None:
    columns = rows.columns
    if as_json:
        for row in (rows.limit(limit) if limit else rows).toLocalIterator():
            click.echo(json.dumps(dict(zip(columns, row, strict=True)), default=str))
        return
    shown = limit or _SHOWN
    taken = rows.limit(shown + 1).collect()
    cells = [[_cell(v) for v in row] for row in taken[:shown]]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    click.echo("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
    for row in cells:
        click.echo("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)))
    if len(taken) > shown:
        click.echo("... more rows: --limit, --where or --json for them", err=True)


def _cell(value: Any) -> str:
    return "null" if value is None else str(value)
