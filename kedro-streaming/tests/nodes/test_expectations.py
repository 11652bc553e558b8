import pytest
from kedro_streaming import StreamingConfigError, check_expectations
from kedro_streaming._nodes.expectations import EXPECTATIONS_METRIC
from pyspark.errors import PySparkException
from pyspark.sql import functions as F

RULES = {
    "n_present": {"expect": "n IS NOT NULL", "action": "quarantine"},
    "n_small": {"expect": "n < 10", "action": "quarantine"},
    "n_even": {"expect": "n % 2 = 0", "action": "warn"},
}
DECLARED_IN = "rules of the test"


def check(frame, rules=RULES, **kwargs):
    return check_expectations(
        frame,
        rules,
        declared_in=DECLARED_IN,
        origin=F.concat(F.lit("row "), F.col("id")),
        **kwargs,
    )


def test_warn_and_quarantine_name_each_rule_and_null_breaks_none(spark):
    frame = spark.createDataFrame(
        [(1, 4, None), (2, 3, None), (3, 12, None), (4, 13, None), (5, None, None)]
        + [(6, 99, "did not parse")],
        "id INT, n INT, problems STRING",
    )
    rows = check(frame, problems="problems").orderBy("id").collect()

    assert [(r.id, r.rejection_reason, r.warnings) for r in rows] == [
        (1, None, None),
        (2, None, "n_even"),
        (3, "n_small", None),
        (4, "n_small", "n_even"),
        # Null breaks no rule but the one that requires the value.
        (5, "n_present", None),
        # Problems found earlier: quarantined with them, no rule checked.
        (6, "did not parse", None),
    ]
    assert rows[0].asDict().keys() == {"id", "n", "rejection_reason", "warnings"}


def test_fail_stops_with_the_rule_the_origin_and_the_fix(spark):
    rules = {**RULES, "n_small": {"expect": "n < 10", "action": "fail"}}
    frame = spark.createDataFrame([(1, 4), (7, 12)], "id INT, n INT")
    with pytest.raises(PySparkException) as failure:
        check(frame, rules).collect()
    message = str(failure.value)
    assert "Expectation 'n_small' failed (action: fail) on row 7" in message
    assert f"change the rule or its action in {DECLARED_IN}" in message
    # Below the limit, nothing fails.
    assert check(frame.filter("n < 10"), rules).count() == 1


@pytest.mark.parametrize(
    ("rule", "words"),
    [
        ({"expect": "n <", "action": "warn"}, ["`n <` cannot be checked", "PARSE"]),
        (
            {"expect": "m > 0", "action": "warn"},
            ["`m > 0` cannot be checked", "columns: id, n"],
        ),
        ({"expect": "n + 1", "action": "warn"}, ["is a int, not a boolean"]),
        ({"expect": "n > 0", "action": "drop"}, ["'drop' is not one of warn"]),
        ({"expect": "n > 0"}, ["None is not one of warn"]),
        (
            {"expect": "n > 0", "action": "quarantene"},
            [
                "action 'quarantene' is not one of warn, quarantine, fail: did you "
                "mean `quarantine`?"
            ],
        ),
        ({"expect": "n > 0", "action": "warn", "on": 1}, ["exactly `expect`"]),
        ({"expect": "", "action": "warn"}, ["`expect` must be"]),
    ],
)
def test_a_bad_rule_fails_before_anything_runs_naming_it(spark, rule, words):
    frame = spark.createDataFrame([(1, 4)], "id INT, n INT")
    with pytest.raises(StreamingConfigError) as error:
        check(frame, {**RULES, "bad_rule": rule})
    message = str(error.value)
    assert message.startswith(f"expectation 'bad_rule' ({DECLARED_IN}): "), message
    for word in words:
        assert word in message


def test_rules_are_analysed_in_one_pass_however_many(spark, monkeypatch):
    """Analysing a plan is the slow part of building a query: 30 rules cost
    no more analyses than 2 (it was one per rule, about 20 ms each)."""
    frame = spark.createDataFrame([(1, 4)], "id INT, n INT")
    analyses = []
    schema = type(frame).schema  # a functools.cached_property
    monkeypatch.setattr(
        type(frame),
        "schema",
        property(lambda self: analyses.append(self) or schema.func(self)),
    )

    def analyses_for(count: int) -> int:
        analyses.clear()
        check(
            frame,
            {
                f"n_over_{i}": {"expect": f"n > {i}", "action": "warn"}
                for i in range(count)
            },
        )
        return len(analyses)

    assert analyses_for(30) == analyses_for(2) <= 2


@pytest.mark.parametrize("name", ["Bad-Name", "quarantined", "unparsed", "warned"])
def test_rule_names_are_metric_names(spark, name):
    frame = spark.createDataFrame([(1, 4)], "id INT, n INT")
    with pytest.raises(StreamingConfigError, match="a rule's name is its metric"):
        check(frame, {name: {"expect": "n > 0", "action": "warn"}})


def test_each_micro_batch_counts_every_rule(stream_test):
    checked = stream_test(check, streams={"frame": "id INT, n INT"})

    steps = checked.run(
        [
            {"frame": [(1, 4), (2, 3), (3, 12), (4, None)]},
            {"frame": [(5, 13), (6, 1), (7, 2)]},
        ]
    )

    assert [step.rows for step in steps] == [
        [
            (1, 4, None, None),
            (2, 3, None, "n_even"),
            (3, 12, "n_small", None),
            (4, None, "n_present", None),
        ],
        [(5, 13, "n_small", "n_even"), (6, 1, None, "n_even"), (7, 2, None, None)],
    ]
    assert [step.expectations for step in steps] == [
        {"n_present": 1, "n_small": 1, "n_even": 1},
        {"n_small": 1, "n_even": 2},
    ]
    counts = [
        report["observedMetrics"][EXPECTATIONS_METRIC]
        for step in steps
        for report in step.progress
    ]
    assert counts == [
        {
            "quarantined": 2,
            "warned": 1,
            "unparsed": 0,
            "n_present": 1,
            "n_small": 1,
            "n_even": 1,
        },
        {
            "quarantined": 1,
            "warned": 2,
            "unparsed": 0,
            "n_present": 0,
            "n_small": 1,
            "n_even": 2,
        },
    ]
