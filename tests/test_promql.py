"""Proves tests/promql.py equivalent to Prometheus: promtool checks its results.

promtool is found through $PROMTOOL, PATH or ~/go/bin/promtool; without one
only the hand-computed checks at the end run.
"""

from __future__ import annotations

import json
import math
import textwrap

import pytest
import yaml
from promql import (
    alert_states,
    evaluate,
    find_promtool,
    load_rules,
    run_promtool,
    write_promtool_test,
)

T0 = 1_700_000_000.0  # Real unix times: promtool sees them shifted to 0.
STEP = 30.0
N = 41  # 20 minutes of samples.


def _series(name: str, values: list[float | None], **labels: str) -> tuple:
    key = frozenset({"__name__": name, **labels}.items())
    return key, [(T0 + i * STEP, v) for i, v in enumerate(values) if v is not None]


def _samples() -> dict:
    """Counters with resets, gauges with zeros, a NaN and overflowing sums, two
    histograms, series that start late, miss samples or are scraped unevenly."""
    a = [i * 3.7 + (i % 3) * 0.25 for i in range(20)] + [i * 1.5 for i in range(N - 20)]
    b = [None] * 8 + [100.0 + i * 0.9 for i in range(8, 36)]
    b[15] = b[16] = None  # A scrape gap of a minute.
    c = [50.0 + i for i in range(N)]
    depth_a = [float((i * 7) % 11) - 3.5 for i in range(N)]
    depth_b = [float(i % 4 == 0) * (i % 3) for i in range(N)]  # Often 0: x/0.
    cap_b = [float(i % 5 == 0) * 2 for i in range(N)]
    up_a = [0.0 if 10 <= i <= 17 else 1.0 for i in range(N)]
    up_b = [0.0 if i in (25, 26) else 1.0 for i in range(30)]
    temp = [20.0 + (i % 6) * 0.5 for i in range(N)]
    temp[12] = math.nan
    bounds = {"0.1": 0.2, "0.5": 0.6, "1": 0.9, "+Inf": 1.0}
    hist = {
        le: [round(i * 4 * f + (i % 2) * f, 6) for i in range(N)]
        for le, f in bounds.items()
    }
    hist["1"][30] = hist["0.5"][30] - 3  # A non-monotonic bucket to fix up.
    series = [
        _series("http_requests_total", a, job="api", instance="a"),
        _series("http_requests_total", b, job="api", instance="b"),
        _series("http_requests_total", c, job="web", instance="c"),
        _series("queue_depth", depth_a, job="api", instance="a"),
        _series("queue_depth", depth_b, job="api", instance="b"),
        _series("queue_capacity", [4.0] * N, instance="a"),
        _series("queue_capacity", cap_b, instance="b"),
        _series("up", up_a, job="api", instance="a"),
        _series("up", up_b, job="api", instance="b"),
        _series("temperature", temp, instance="a"),
        # Sums overflow: averages go incremental.
        _series("huge", [1.5e308 + (i % 3) * 1e307 for i in range(N)], i="1"),
        _series("huge", [1.7e308 - (i % 4) * 1e307 for i in range(N)], i="2"),
    ]
    # A second histogram: le="1" and le="1.0" are one bucket; one bound is 0.
    web = {"0": 0.5, "0.5": 2.0, "1": 3.0, "1.0": 1.0, "+Inf": 5.0}
    web_hist = {le: [i * f for i in range(N)] for le, f in web.items()}
    for job, buckets in (("api", hist), ("web", web_hist)):
        series += [
            _series("latency_seconds_bucket", v, job=job, le=le)
            for le, v in buckets.items()
        ]
    # Scraped at uneven times on a 10s grid, to cross the extrapolation
    # thresholds: gaps of 10 to 50s, a reset, values of varied size.
    ticks = [
        sum((1, 2, 3, 1, 4, 2, 5, 1, 1, 3)[: j % 10 + 1]) + 23 * (j // 10)
        for j in range(50)
    ]
    counter = [(T0 + 10 * t, (j % 17) * 2.5 + j / 7) for j, t in enumerate(ticks)]
    series.append(
        (frozenset({"__name__": "irregular_total", "job": "batch"}.items()), counter)
    )
    return dict(series)


# Each expression is checked at every eval time, and each alert's firing set.
RULES = {
    "RequestRate": ("rate(http_requests_total[2m]) > 0.5", "1m"),
    "Increase": ('increase(http_requests_total{job=~"api|web"}[5m])', None),
    "QueueDelta": ("delta(queue_depth[3m]) < -1", None),
    "QueueDeriv": ('deriv(queue_depth{instance!="z"}[5m]) != 0', "30s"),
    "InstanceDown": ("up == 0", "2m"),
    "Spread": (
        "max_over_time(queue_depth[2m]) - min_over_time(queue_depth[2m]) >= 2",
        None,
    ),
    "AvgHigh": ("avg_over_time(queue_depth[5m]) > bool 0", None),
    "Last": ("last_over_time(queue_depth[1m])", None),
    "Clamp": ("clamp_min(queue_depth, 0) + clamp_max(queue_depth, 4)", None),
    "Abs": ('abs(-queue_depth{instance!~"b"})', None),
    "LatencyP90": (
        "histogram_quantile(0.9, sum by (le) (rate(latency_seconds_bucket[5m])))",
        None,
    ),
    "LatencyRaw": ("histogram_quantile(0.5, latency_seconds_bucket)", None),
    "LatencyOver": ("histogram_quantile(1.5, latency_seconds_bucket) > 0", None),
    "JobRate": ("sum by (job) (rate(http_requests_total[5m])) > 0", "1m"),
    "Counts": ("count without (instance) (up)", None),
    "MinMax": ("max(queue_depth) - min by () (queue_depth) > 1", None),
    "Avg": ("avg without (job) (queue_depth) != 1", None),
    "Ratio": ("queue_depth / on(instance) queue_capacity", None),
    "Mod": ('queue_depth % 3 + queue_depth{instance="a"} % -2.5', None),
    "Over": ("queue_depth > on(instance) queue_capacity", None),
    "Under": ("queue_depth <= ignoring(job) queue_capacity", None),
    "ScalarLeft": ("2 < queue_depth", None),
    "ScalarArith": ("10 - queue_depth * 2 == 3", None),
    "DownAndDeep": ("up == 0 and on(instance) queue_depth > -3", None),
    "RateOrZero": ("rate(http_requests_total[1m]) or vector(0)", None),
    "Unless": ("queue_depth unless ignoring(job) queue_capacity == 0", None),
    "Clock": ("vector(time() % 600) > 300", None),
    "ByName": ('{__name__=~"queue_.*", instance!~"b"}', None),
    "RateBool": ("rate(http_requests_total[5m]) * 60 >= bool 10", None),
    "Hot": ("max_over_time(temperature[2m]) > 21 or temperature", "1m"),
}
PANELS = [
    *("time()", "(1 + 2) * 3 / 4", "-(time() % 7)", "2 > bool 1", "0 / 0", "-1 / 0"),
    *("5 % 0", "deriv(queue_capacity[90s])", "avg_over_time(temperature[1m])"),
    *("temperature != 21", "clamp_min(temperature, 21)", "clamp_max(temperature, 21)"),
    *("clamp_min(temperature, Inf)", "clamp_max(temperature, -Inf)"),  # Inf beats NaN
    *("sum(temperature)", "queue_depth >= bool on(instance) queue_capacity"),
    'histogram_quantile(0.05, latency_seconds_bucket{job="web"})',
    *("rate(irregular_total[1m])", "increase(irregular_total[150s])"),
    *("delta(irregular_total[2m])", "deriv(irregular_total[100s])"),
    *("avg_over_time(huge[2m])", "avg(huge)", "sum(huge)", "max(huge) - min(huge)"),
]


def _rules_file(tmp_path, rules: dict) -> str:
    doc = {"groups": [{"name": "g", "rules": []}]}
    for name, (expr, hold) in rules.items():
        rule = {"alert": name, "expr": expr, "labels": {"severity": "page"}}
        rule |= {"for": hold} if hold else {}
        rule["annotations"] = {"summary": "{{ $labels.instance }} is at {{ $value }}"}
        doc["groups"][0]["rules"].append(rule)
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(path)


def _eval_times() -> list[float]:
    # A 20s rule step against 30s samples puts windows off the sample grid;
    # going 6 minutes past the data lets series go stale, at 5m exactly.
    return [T0 + i * 20.0 for i in range(79)]


def _write(tmp_path, rules: dict, panels: list[str]):
    return write_promtool_test(
        _rules_file(tmp_path, rules), _samples(), 10.0, _eval_times(),
        tmp_path / "promql_test.yml", evaluation_interval=20.0, exprs=panels,
    )  # fmt: skip


@pytest.fixture
def promtool():
    path = find_promtool()
    if path is None:
        pytest.skip("no promtool binary ($PROMTOOL, PATH, ~/go/bin/promtool)")
    return path


def test_rules_rejected_outside_the_subset(tmp_path):
    with pytest.raises(NotImplementedError, match="group_left"):
        evaluate("up * on() group_left max(up)", _samples(), T0 + 600)
    with pytest.raises(NotImplementedError, match="offset"):
        evaluate("up offset 5m", _samples(), T0 + 600)
    with pytest.raises(NotImplementedError, match="predict_linear"):
        evaluate("predict_linear(up[5m], 60)", _samples(), T0 + 600)
    rules = tmp_path / "rules.yml"
    rules.write_text("groups: [{name: g, rules: [{record: r, expr: up}]}]")
    with pytest.raises(ValueError, match="recording rule r"):
        load_rules(rules)


def test_equivalent_to_promtool(tmp_path, promtool):
    test_file = _write(tmp_path, RULES, PANELS)
    doc = yaml.safe_load(test_file.read_text())["tests"][0]
    firing = sum(len(t["exp_alerts"]) for t in doc["alert_rule_test"])
    samples = sum(len(t["exp_samples"]) for t in doc["promql_expr_test"])
    # The data does exercise the rules: as many checks as the fixed series give.
    assert (len(doc["promql_expr_test"]), samples, firing) == (4398, 4928, 2914)
    done = run_promtool(test_file, promtool)
    assert done.returncode == 0, (
        f"{promtool} test rules {test_file}:\n{done.stdout}{done.stderr}"
    )


def test_promtool_catches_a_wrong_value(tmp_path, promtool):
    test_file = _write(tmp_path, {"Increase": RULES["Increase"]}, [])
    doc = yaml.safe_load(test_file.read_text())
    case = next(c for c in doc["tests"][0]["promql_expr_test"] if c["exp_samples"])
    case["exp_samples"][0]["value"] = math.nextafter(
        case["exp_samples"][0]["value"], math.inf
    )
    test_file.write_text(yaml.safe_dump(doc, sort_keys=False))
    done = run_promtool(test_file, promtool)
    assert done.returncode != 0, done.stdout
    assert json.dumps(case["expr"]) in done.stdout + done.stderr  # Go-quoted


def test_rate_extrapolates_like_prometheus():
    samples = {
        frozenset({("__name__", "c")}): [
            (10.0, 1),
            (20.0, 4),
            (30.0, 5),
            (40.0, 8),
            (50.0, 2),
        ]
    }

    def at(expr, t):
        return evaluate(expr, samples, t)[frozenset()]

    # The reset after 8 counts 8 + 2: the increase is 9 over the 40s sampled.
    # Window (0, 60]: both edges 10s away, under 1.1 * the 10s average, so
    # extrapolate to them, but at the start only to where the counter was 0:
    # 40s * 1/9 before the first sample.
    assert at("increase(c[60s])", 60) == 9 * ((40 + 40 * (1 / 9) + 10) / 40)
    assert at("rate(c[60s])", 60) == 9 * ((40 + 40 * (1 / 9) + 10) / 40 / 60)
    # Window (0, 100]: the end is 50s away, past the threshold: extrapolate
    # half an average interval only.
    assert at("increase(c[100s])", 100) == 9 * ((40 + 40 * (1 / 9) + 5) / 40)
    # delta has no resets and no zero point: window (25, 55] holds 5, 8, 2.
    assert at("delta(c[30s])", 55) == -3 * ((20 + 5 + 5) / 20)


def test_for_goes_pending_then_firing(tmp_path):
    path = tmp_path / "rules.yml"
    path.write_text(
        textwrap.dedent("""\
        groups:
        - name: g
          rules:
          - alert: Down
            expr: up == 0
            for: 1m
            labels: {severity: page}
        """)
    )
    # Down from 60s to 150s: pending from 60s, firing once down for 1m, at
    # 120s; resolved (no longer reported) when up again, at 180s.
    up = frozenset({"__name__": "up", "job": "a"}.items())
    samples = {up: [(t * 30.0, 0.0 if 2 <= t <= 5 else 1.0) for t in range(10)]}
    states = alert_states(load_rules(path), samples, 0, 270, 30)
    labels = frozenset({"job": "a", "severity": "page", "alertname": "Down"}.items())
    got = {t: [s for _, k, s in alerts if k == labels] for t, alerts in states.items()}
    assert got == {
        0.0: [], 30.0: [], 60.0: ["pending"], 90.0: ["pending"], 120.0: ["firing"],
        150.0: ["firing"], 180.0: [], 210.0: [], 240.0: [], 270.0: [],
    }  # fmt: skip


def test_histogram_quantile_and_name_rules():
    def s(name, v, **labels):
        return frozenset({"__name__": name, **labels}.items()), [(0.0, v)]

    samples = dict(
        [
            s("h", 10, le="1"),
            s("h", 30, le="2"),
            s("h", 25, le="4"),
            s("h", 40, le="+Inf"),
            s("g", 3, i="x"),
        ]
    )
    # Buckets 10, 30, 30 (the 25 is lifted), 40: rank 0.5 * 40 = 20 falls in
    # (1, 2] halfway; rank 30 in the first bucket that reaches it, not in the
    # flat (2, 4]; rank 36 lies past the last finite bucket: its bound.
    for q, want in ((0.5, 1.5), (0.75, 2.0), (0.9, 4.0)):
        assert evaluate(f"histogram_quantile({q}, h)", samples, 1) == {
            frozenset(): want
        }
    named = frozenset({"__name__": "g", "i": "x"}.items())
    assert evaluate("g > 1", samples, 1) == {named: 3}  # A filter keeps the name.
    assert evaluate("g > bool 1", samples, 1) == {frozenset({("i", "x")}): 1}
    assert evaluate("last_over_time(g[1m])", samples, 1) == {named: 3}
    assert evaluate("g", samples, 300) == {}  # Lookback is left-open.
