"""``feed``: a table's changes as Debezium writes them, from a CSV of its
rows, to try a table kept from changes (docs/cdc.md)."""

from __future__ import annotations

import csv
from pathlib import Path

import click

from kedro_streaming.devtools.feed import write_feed


@click.command()
@click.argument("table", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--key", "keys", multiple=True, required=True, help="a key column")
@click.option(
    "--to",
    "folder",
    required=True,
    type=click.Path(path_type=Path),
    help="the folder of the feed's files: 0000.json the snapshot, then a round each",
)
@click.option("--rounds", type=int, default=5, show_default=True)
@click.option(
    "--changes",
    type=int,
    default=0,
    help="changes a round (default: a tenth of the rows)",
)
@click.option(
    "--copies",
    type=float,
    default=0.05,
    show_default=True,
    help="the share of events delivered twice",
)
@click.option(
    "--late",
    type=float,
    default=0.05,
    show_default=True,
    help="the share of events delivered a round late",
)
@click.option("--seed", type=int, default=7, show_default=True)
@click.option(
    "--final",
    type=click.Path(dir_okay=False, path_type=Path),
    help="also write the table as it is after every change (CSV)",
)
def feed(  # noqa: PLR0913 (click passes each option)
    *,
    table: Path,
    keys: tuple[str, ...],
    folder: Path,
    rounds: int,
    changes: int,
    copies: float,
    late: float,
    seed: int,
    final: Path | None,
) -> None:
    """Writes TABLE's life as Debezium tells it (JSON lines): every row read
    (op r), then rounds of updates, deletes and creates, some events copied
    and some late, one file per round."""
    try:
        rows = write_feed(
            table,
            list(keys),
            folder,
            rounds=rounds,
            changes=changes,
            copies=copies,
            late=late,
            seed=seed,
        )
    except ValueError as error:
        raise click.ClickException(str(error)) from None
    if final:
        with final.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]) if rows else [])
            writer.writeheader()
            writer.writerows(rows)
    click.echo(
        f"{folder}: {rounds + 1} files (the snapshot, then {rounds} rounds); "
        f"{len(rows)} rows after the last change" + (f", in {final}" if final else "")
    )
