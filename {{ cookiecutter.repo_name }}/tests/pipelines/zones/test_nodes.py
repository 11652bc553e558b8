import json

from {{ cookiecutter.python_package }}.pipelines.zones.nodes import (
    applicable_zone_changes,
    refused_zone_changes,
)

CHANGES = {"keys": ["LocationID"], "sequence": ["_lsn"]}


def event(op: str, lsn: int, zone: int, borough: str) -> tuple[str]:
    """Debezium's event of a change to zone ``zone``, ``lsn`` in the log."""
    image = {"LocationID": zone, "Borough": borough, "Zone": "Astoria"}
    return (
        json.dumps(
            {
                "op": op,
                "before": image if op == "d" else None,
                "after": None if op == "d" else image,
                "source": {"lsn": lsn},
            }
        ),
    )


def test_a_late_change_never_overwrites_a_newer_one(stream_test):
    zones = stream_test(
        applicable_zone_changes,
        streams={"zone_changes": "value STRING"},
        changes=CHANGES,
    )
    zones.step(zone_changes=[event("r", 1, 7, "Queens"), event("r", 2, 8, "Bronx")])
    moved = zones.step(
        zone_changes=[event("u", 5, 7, "Brooklyn"), event("d", 6, 8, "Bronx")]
    )
    late = zones.step(zone_changes=[event("u", 3, 7, "Bronx"), event("u", 4, 8, "EWR")])

    assert [(r.LocationID, r._lsn, r.Borough) for r in moved.table] == [
        (7, 5, "Brooklyn")
    ]
    assert late.table == moved.table
    assert late.changes == {"not_newer_than_row": 1, "older_than_remembered_delete": 1}


def test_history_keeps_every_version_a_late_change_in_its_place(stream_test):
    zones = stream_test(
        applicable_zone_changes,
        streams={"zone_changes": "value STRING"},
        changes={**CHANGES, "scd_type": 2},
    )
    zones.step(zone_changes=[event("r", 1, 7, "Queens"), event("u", 5, 7, "Brooklyn")])
    late = zones.step(zone_changes=[event("u", 3, 7, "Bronx")])

    # A Row's attributes cannot begin with "__": by name.
    assert [(r.Borough, r["__start_at"], r["__end_at"]) for r in late.table] == [
        ("Queens", 1, 3),
        ("Bronx", 3, 5),
        ("Brooklyn", 5, None),
    ]


def test_what_cannot_be_applied_is_refused_with_its_reason(spark):
    events = spark.createDataFrame(
        [
            event("u", 9, 7, "Queens"),
            ('{"op": "u", "after": {"LocationID": 7}}',),
            (None,),
        ],
        "value STRING",
    )

    assert applicable_zone_changes(events).count() == 1
    assert sorted(r.problems for r in refused_zone_changes(events).collect()) == [
        "missing sequence source.lsn",
        "tombstone (the delete event before it applied the change)",
    ]
