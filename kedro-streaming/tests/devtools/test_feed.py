"""`kedro streams feed`: a CSV table's life as Debezium events, kept as type 1
and type 2 tables by the plugin, which must hold what the feed says the
table holds after its last change (copies and late events included)."""

from __future__ import annotations

import csv
import json

from click.testing import CliRunner
from kedro_streaming import debezium_changes
from kedro_streaming._connectors.changes import END_AT, Changes
from kedro_streaming._connectors.scd import create_target, keep_changes
from kedro_streaming.devtools.cli_feed import feed

ZONE = "LocationID INT NOT NULL, Borough STRING, Zone STRING, service_zone STRING"
COLUMNS = ["LocationID", "Borough", "Zone", "service_zone"]


def test_a_feed_kept_as_types_1_and_2_holds_the_table_after_its_last_change(
    spark, tmp_path
):
    boroughs = ["Bronx", "Brooklyn", "Manhattan", "Queens"]
    with (tmp_path / "zones.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(COLUMNS)
        for n in range(1, 41):
            writer.writerow(
                [n, boroughs[n % 4], f"Zone {n}", ["Yellow", "Boro"][n % 2]]
            )
    ran = CliRunner().invoke(
        feed,
        [str(tmp_path / "zones.csv"), "--key", "LocationID", "--to",
         str(tmp_path / "feed"), "--rounds", "2", "--changes", "15",
         "--copies", "0.2", "--late", "0.2", "--final", str(tmp_path / "final.csv")],
    )  # fmt: skip
    assert ran.exit_code == 0, ran.output
    final = list(csv.DictReader((tmp_path / "final.csv").open()))
    assert ran.output == (
        f"{tmp_path / 'feed'}: 3 files (the snapshot, then 2 rounds); "
        f"{len(final)} rows after the last change, in {tmp_path / 'final.csv'}\n"
    )
    files = sorted((tmp_path / "feed").glob("*.json"))
    events = [json.loads(line) for f in files for line in f.read_text().splitlines()]
    ops = [e["op"] for e in events]
    lsns = [e["source"]["lsn"] for e in events]
    # 40 rows read, 30 changes; copies and late ones: out of order, repeated.
    assert ops[:40] == ["r"] * 40 and len(set(lsns)) == 70 < len(lsns)
    assert lsns != sorted(lsns) and {"c", "u", "d"} <= set(ops)

    expected = {tuple(str(row[c]) for c in COLUMNS) for row in final}
    for scd_type in (1, 2):
        spec = Changes.parse(
            {"keys": "LocationID", "sequence": "_lsn", "scd_type": scd_type}
        )
        path = str(tmp_path / f"type{scd_type}")
        batches = [
            debezium_changes(spark.read.text(str(f)), ZONE)
            .where("problems IS NULL")
            .select(*COLUMNS, "_op", "_lsn")
            for f in files
        ]
        new = create_target(spark, path, spec, batches[0])
        apply = keep_changes(path, spec, "zones", lambda: "feed", new)
        for batch_id, batch in enumerate(batches):
            apply(batch, batch_id)
        current = spark.read.format("delta").load(path)
        if scd_type == 2:
            current = current.where(f"{END_AT} IS NULL")
        held = {tuple(str(v) for v in r) for r in current.select(*COLUMNS).collect()}
        assert held == expected, scd_type
