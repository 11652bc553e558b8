"""Exact evaluator of a PromQL subset and of alerting rules, as Prometheus 3.x.

The tests check shipped alert rules and Grafana panel queries with it against
series scraped from real runs, where no Prometheus runs. It follows the Go
source (promql/engine.go, functions.go, quantile.go, rules/alerting.go): float
samples, times in whole milliseconds as the TSDB keeps them, Kahan sums where
Prometheus has them, so results match bit for bit; `write_promtool_test`
writes a promtool unit test of its own results to prove it. Anything outside
the subset raises NotImplementedError naming it.
"""

from __future__ import annotations

import bisect
import functools
import json
import math
import operator
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import promql_parser as pp
import yaml

Labels = frozenset[tuple[str, str]]
Samples = dict[Labels, list[tuple[float, float]]]
Vector = dict[Labels, float]
Alert = tuple[str, Labels, str]  # alertname, alert labels, pending|firing
_Store = dict[Labels, tuple[list[int], list[float]]]  # times in ms, values
NAME = "__name__"
LOOKBACK_MS = 300_000  # Prometheus' default --query.lookback-delta.
_parse = functools.cache(pp.parse)


def _ms(t: float) -> int:
    return round(t * 1000)


def _store(samples: Samples) -> _Store:
    # An empty label value is no label at all, as in Prometheus.
    return {
        frozenset(p for p in k if p[1]): (
            [_ms(t) for t, _ in s],
            [float(v) for _, v in s],
        )
        for k, s in samples.items()
        if s
    }


def _put(out: Vector, key: Labels, value: float) -> None:
    if key in out:
        raise ValueError("vector cannot contain metrics with the same labelset")
    out[key] = value


def _unnamed(k: Labels) -> Labels:
    return frozenset(p for p in k if p[0] != NAME)


def _vec(result: float | Vector) -> Vector:
    return {frozenset(): result} if isinstance(result, float) else result


def _kahan(s: float, c: float, inc: float) -> tuple[float, float]:
    # util/kahansum.Inc: Neumaier's variant, reset on overflow.
    t = s + inc
    if math.isinf(t):
        return t, 0.0
    return t, c + ((s - t) + inc if abs(s) >= abs(inc) else (inc - t) + s)


def _mean(vals: list[float]) -> float:
    # avg, avg_over_time: Kahan mean, incremental once the sum would overflow.
    s, c, mean, incremental = vals[0], 0.0, 0.0, False
    for n, v in enumerate(vals[1:], start=2):
        if not incremental:
            ns, nc = _kahan(s, c, v)
            if not math.isinf(ns):
                s, c = ns, nc
                continue
            incremental, mean, c = True, s / (n - 1), c / (n - 1)
        mean, c = _kahan((n - 1) / n * mean, (n - 1) / n * c, v / n)
    return mean + c if incremental else s / len(vals) + c / len(vals)


def _go_max(x: float, y: float) -> float:
    # Go's math.Max: +Inf beats NaN, which beats numbers; +0 beats -0.
    if math.inf in (x, y) or math.isnan(x) or math.isnan(y):
        return math.inf if math.inf in (x, y) else math.nan
    return x if x == y == 0 and math.copysign(1, x) > 0 else max(y, x)


def _div(a: float, b: float) -> float:
    if b != 0:
        return a / b
    nan = a == 0 or math.isnan(a)  # IEEE division, where Python raises.
    return math.nan if nan else math.copysign(math.inf, a) * math.copysign(1, b)


def _mod(a: float, b: float) -> float:
    # Go's math.Mod is exact like fmod, with NaN where Python raises.
    bad = b == 0 or math.isinf(a) or math.isnan(a) or math.isnan(b)
    return math.nan if bad else math.fmod(a, b)


def _extrapolated(t, v, at, rng, *, counter: bool, rate: bool) -> float | None:
    """extrapolatedRate of promql/functions.go: rate, increase and delta."""
    if len(v) < 2:
        return None
    result = v[-1] - v[0]
    for prev, cur in zip(v, v[1:]) if counter else ():
        if cur < prev:  # A reset: the counter went on from 0.
            result += prev
    to_start, to_end = (t[0] - (at - rng)) / 1000, (at - t[-1]) / 1000
    sampled = (t[-1] - t[0]) / 1000
    avg = sampled / (len(v) - 1)
    # Extrapolate to an edge of the window only if a sample is about as near
    # as samples are apart, else half an interval; a counter not below 0.
    if to_start >= avg * 1.1:
        to_start = avg / 2
    if counter and result > 0 and v[0] >= 0:
        to_start = min(to_start, sampled * (v[0] / result))
    if to_end >= avg * 1.1:
        to_end = avg / 2
    factor = (sampled + to_start + to_end) / sampled if sampled != 0 else 1.0
    if rate:  # Go's Duration.Seconds(): seconds + nanoseconds / 1e9.
        factor /= float(rng // 1000) + float(rng % 1000 * 1_000_000) / 1e9
    return result * factor


def _deriv(t, v, *_) -> float | None:
    """linearRegression's slope, with x in seconds from the first sample."""
    if len(v) < 2:
        return None
    if all(y == v[0] for y in v[1:]):
        return math.nan if math.isinf(v[0]) else 0.0
    sums = [(0.0, 0.0)] * 4  # x, y, x*y, x*x, each with its Kahan term
    for ti, y in zip(t, v):
        x = (ti - t[0]) / 1e3
        sums = [_kahan(*sc, i) for sc, i in zip(sums, (x, y, x * y, x * x))]
    sx, sy, sxy, sx2 = (s + c for s, c in sums)
    return _div(sxy - sx * sy / len(v), sx2 - sx * sx / len(v))


def _extreme(vals: list[float], is_max: bool) -> float:
    # A NaN gives way to any later value: NaN only if all are NaN.
    gt = operator.gt if is_max else operator.lt
    return functools.reduce(lambda b, v: v if math.isnan(b) or gt(v, b) else b, vals)


def _sum(vals: list[float]) -> float:
    s, c = functools.reduce(lambda sc, v: _kahan(*sc, v), vals[1:], (vals[0], 0.0))
    return s + c


_AGGS = {
    "sum": _sum,
    "avg": _mean,
    "max": lambda vals: _extreme(vals, True),
    "min": lambda vals: _extreme(vals, False),
    "count": lambda vals: float(len(vals)),
}
_RANGE = {
    "rate": functools.partial(_extrapolated, counter=True, rate=True),
    "increase": functools.partial(_extrapolated, counter=True, rate=False),
    "delta": functools.partial(_extrapolated, counter=False, rate=False),
    "deriv": _deriv,
    "max_over_time": lambda t, v, *_: _extreme(v, True),
    "min_over_time": lambda t, v, *_: _extreme(v, False),
    "avg_over_time": lambda t, v, *_: _mean(v),
    "last_over_time": lambda t, v, *_: v[-1],
}
_CMP = {"==": operator.eq, "!=": operator.ne, ">": operator.gt, "<": operator.lt}
_CMP |= {">=": operator.ge, "<=": operator.le}
_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": _div, "%": _mod}
_OPS |= _CMP
_GROUPED = (pp.VectorMatchCardinality.ManyToOne, pp.VectorMatchCardinality.OneToMany)
_MATCH = {
    "MatchOp.Equal": operator.eq,
    "MatchOp.NotEqual": operator.ne,
    # Fully anchored, and since Prometheus 3.0 `.` matches a newline too.
    "MatchOp.Re": lambda have, want: re.fullmatch(want, have, re.S) is not None,
    "MatchOp.NotRe": lambda have, want: re.fullmatch(want, have, re.S) is None,
}


def _almost_equal(a: float, b: float, eps: float = 1e-12) -> bool:
    # Prometheus' own util/almost.Equal, which histogram_quantile uses to treat
    # near-equal bucket counts as equal: part of the semantics, not a test bound.
    if a == b or (math.isnan(a) and math.isnan(b)):
        return True
    tiny = sys.float_info.min
    if a == 0 or b == 0 or abs(a) + abs(b) < tiny:
        return abs(a - b) < eps * tiny
    return abs(a - b) / min(abs(a) + abs(b), sys.float_info.max) < eps


def _bucket_quantile(q: float, buckets: list[tuple[float, float]]) -> float:
    """BucketQuantile of promql/quantile.go, on buckets sorted by bound."""
    if math.isnan(q) or not 0 <= q <= 1:
        return q if math.isnan(q) else math.copysign(math.inf, q)
    if buckets[-1][0] != math.inf:
        return math.nan
    bounds, counts = [], []
    for ub, c in buckets:  # Buckets of one bound (le="1", le="1.0") add up.
        if bounds and bounds[-1] == ub:
            counts[-1] += c
        else:
            bounds.append(ub)
            counts.append(c)
    prev = counts[0]  # Ignore float noise, then lift any decrease.
    for i, c in enumerate(counts[1:], 1):
        if c != prev and (c < prev or _almost_equal(prev, c)):
            counts[i] = prev
        else:
            prev = c
    if len(counts) < 2 or counts[-1] == 0:
        return math.nan
    rank, lo, hi = q * counts[-1], 0, len(counts) - 1
    while lo < hi:  # Go's sort.Search over all buckets but +Inf.
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if counts[mid] >= rank else (mid + 1, hi)
    if lo == len(counts) - 1 or (lo == 0 and bounds[0] <= 0):
        return bounds[-2] if lo else bounds[0]
    start, below = (bounds[lo - 1], counts[lo - 1]) if lo else (0.0, 0.0)
    return start + (bounds[lo] - start) * ((rank - below) / (counts[lo] - below))


def _histogram_quantile(q: float, vec: Vector) -> Vector:
    groups: dict[Labels, list[tuple[float, float]]] = {}
    for k, v in vec.items():
        le = dict(k).get("le", "")
        try:  # Go's ParseFloat takes no spaces or "_"; bad `le`s are skipped.
            ub = float(le) if le.strip() == le and "_" not in le else math.nan
        except ValueError:
            continue
        if not math.isnan(ub):
            sig = frozenset(p for p in k if p[0] != "le")
            groups.setdefault(sig, []).append((ub, v))
    out: Vector = {}
    for sig, bs in groups.items():
        _put(out, _unnamed(sig), _bucket_quantile(q, sorted(bs, key=lambda b: b[0])))
    return out


def _each(vec: Vector, fn) -> Vector:
    out: Vector = {}
    for k, v in vec.items():
        _put(out, _unnamed(k), fn(v))
    return out


_FUNCS = {
    "time": lambda at: float(at) / 1000,
    "vector": lambda at, s: {frozenset(): s},
    "abs": lambda at, vec: _each(vec, abs),
    # clamp() is Max(min, Min(max, v)) in Go: these reduce to one of them.
    "clamp_min": lambda at, vec, lo: _each(vec, lambda v: _go_max(lo, v)),
    "clamp_max": lambda at, vec, hi: _each(vec, lambda v: -_go_max(-hi, -v)),
    "histogram_quantile": lambda at, q, vec: _histogram_quantile(q, vec),
}


def _matching(k: Labels, mod: pp.BinModifier | None, keep_name: bool = False) -> Labels:
    # The labels `on`/`ignoring` match on, or those a one-to-one result keeps.
    m = mod.matching if mod else None
    if m is not None and m.type == pp.LabelModifierType.Include:
        return frozenset(p for p in k if p[0] in m.labels)
    drop = set(m.labels) if m else set()
    return frozenset(p for p in k if (keep_name or p[0] != NAME) and p[0] not in drop)


def _set_op(op: str, lhs: Vector, rhs: Vector, mod: pp.BinModifier | None) -> Vector:
    if op == "or":
        seen, out = {_matching(k, mod) for k in lhs}, dict(lhs)
        for k, v in rhs.items():
            if _matching(k, mod) not in seen:
                _put(out, k, v)
        return out
    right, keep = {_matching(k, mod) for k in rhs}, op == "and"
    return {k: v for k, v in lhs.items() if (_matching(k, mod) in right) == keep}


def _one_to_one(lhs: Vector, rhs: Vector, mod: pp.BinModifier | None) -> list:
    right: Vector = {}
    for k, v in rhs.items() if lhs else ():
        if _matching(k, mod) in right:
            raise ValueError("duplicate series for a match group on the right")
        right[_matching(k, mod)] = v
    pairs, matched = [], set()
    for k, v in lhs.items():
        if (sig := _matching(k, mod)) in right:
            if sig in matched:
                raise ValueError("multiple matches for labels: needs group_left")
            matched.add(sig)
            pairs.append((_matching(k, mod, keep_name=True), v, (v, right[sig])))
    return pairs


@dataclass
class _Query:
    """Evaluates AST nodes at one time `at` (ms) over a store of series."""

    st: _Store
    at: int

    def eval(self, node: pp.Expr) -> float | Vector:
        if type(node) not in self.NODES:
            raise NotImplementedError(f"{type(node).__name__} {node}")
        return self.NODES[type(node)](self, node)

    def select(self, vs: pp.VectorSelector) -> list:
        if vs.offset is not None or vs.at is not None or vs.matchers.or_matchers:
            raise NotImplementedError(f"offset, @ or 'or' matchers in {vs}")
        ms = [(str(m.op), m.name, m.value) for m in vs.matchers.matchers]
        ms += [("MatchOp.Equal", NAME, vs.name)] if vs.name else []

        def ok(k: Labels) -> bool:
            return all(_MATCH[op](dict(k).get(n, ""), val) for op, n, val in ms)

        return [(k, *self.st[k]) for k in self.st if ok(k)]

    def selector(self, node: pp.VectorSelector) -> Vector:
        out = {}
        for k, t, v in self.select(node):
            i = bisect.bisect_right(t, self.at) - 1  # The newest in (at - 5m, at].
            if i >= 0 and t[i] > self.at - LOOKBACK_MS:
                out[k] = v[i]
        return out

    def call(self, node: pp.Call) -> float | Vector:
        name, args, at = node.func.name, node.args, self.at
        if name not in _RANGE:
            if name not in _FUNCS:
                raise NotImplementedError(f"function {name}()")
            return _FUNCS[name](at, *map(self.eval, args))
        if not isinstance(args[0], pp.MatrixSelector):
            raise NotImplementedError(f"{name} of {args[0]}")
        rng, out = args[0].range // timedelta(milliseconds=1), {}
        for k, t, v in self.select(args[0].vector_selector):
            lo, hi = bisect.bisect_right(t, at - rng), bisect.bisect_right(t, at)
            r = _RANGE[name](t[lo:hi], v[lo:hi], at, rng) if hi > lo else None
            if r is not None:  # last_over_time acts like offset: keeps the name.
                _put(out, k if name == "last_over_time" else _unnamed(k), r)
        return out

    def aggregate(self, node: pp.AggregateExpr) -> Vector:
        op, mod = str(node.op), node.modifier
        if op not in _AGGS or node.param is not None:
            raise NotImplementedError(f"aggregation {op}")
        without = mod is not None and mod.type == pp.AggModifierType.Without
        names = set(mod.labels if mod else ()) | ({NAME} if without else set())
        vec, groups = self.eval(node.expr), {}
        for k in sorted(vec, key=sorted):  # Prometheus' label order, for Kahan sums.
            g = frozenset(p for p in k if (p[0] in names) != without)
            groups.setdefault(g, []).append(vec[k])
        return {g: _AGGS[op](vals) for g, vals in groups.items()}

    def binary(self, node: pp.BinaryExpr) -> float | Vector:
        op, mod = str(node.op), node.modifier
        fills = (mod.fill_values.lhs, mod.fill_values.rhs) if mod else (None, None)
        if (mod and mod.card in _GROUPED) or fills != (None, None):
            raise NotImplementedError(f"group_left/group_right/fill in {node}")
        lhs, rhs = self.eval(node.lhs), self.eval(node.rhs)
        if op in ("and", "or", "unless"):
            return _set_op(op, lhs, rhs, mod)
        if op not in _OPS:
            raise NotImplementedError(f"operator {op}")
        if isinstance(lhs, float) and isinstance(rhs, float):
            return float(_OPS[op](lhs, rhs))
        if isinstance(lhs, float) or isinstance(rhs, float):
            vec, swap = (rhs, True) if isinstance(lhs, float) else (lhs, False)
            pairs = [(k, v, (lhs, v) if swap else (v, rhs)) for k, v in vec.items()]
        else:
            pairs = _one_to_one(lhs, rhs, mod)
        is_filter, out = op in _CMP and not (mod and mod.return_bool), {}
        for k, value, operands in pairs:
            r = _OPS[op](*operands)
            # A comparison filter keeps the vector's (or the left) sample whole;
            # arithmetic and `bool` drop the metric name.
            if not is_filter:
                _put(out, _unnamed(k), float(r))
            elif r:
                _put(out, k, value)
        return out

    def unary(self, node: pp.UnaryExpr) -> float | Vector:
        v = self.eval(node.expr)
        return -v if isinstance(v, float) else _each(v, operator.neg)

    NODES = {
        pp.NumberLiteral: lambda self, node: float(node.val),
        pp.ParenExpr: lambda self, node: self.eval(node.expr),
        pp.UnaryExpr: unary,
        pp.VectorSelector: selector,
        pp.Call: call,
        pp.AggregateExpr: aggregate,
        pp.BinaryExpr: binary,
    }


def evaluate(expr: str, samples: Samples, at: float) -> Vector:
    """Evaluates an instant query at unix time `at`; a scalar as {frozenset(): v}."""
    return _vec(_Query(_store(samples), _ms(at)).eval(_parse(expr)))


@dataclass
class AlertRule:
    """An alerting rule; `for_ms` is its `for` in milliseconds."""

    name: str
    expr: str
    for_ms: int = 0
    labels: dict[str, str] = field(default_factory=dict)


def load_rules(path: str | Path) -> list[AlertRule]:
    """Reads the alerting rules of a Prometheus rules file.

    A group's `interval` is ignored: alert_states takes the step.

    Raises:
        ValueError: on a recording rule.
        NotImplementedError: on other settings (keep_firing_for, templated labels, ...).
    """
    rules = []
    for group in yaml.safe_load(Path(path).read_text())["groups"]:
        for r in group["rules"]:
            if "record" in r:
                raise ValueError(f"recording rule {r['record']} is not supported")
            labels = {str(k): str(v) for k, v in (r.get("labels") or {}).items()}
            extra = set(r) - {"alert", "expr", "for", "labels", "annotations"}
            extra |= set(group) - {"name", "interval", "rules"}
            if extra or any("{{" in v for v in labels.values()):
                raise NotImplementedError(
                    f"{sorted(extra) or 'templated labels'} in {r['alert']}"
                )
            hold = str(r.get("for", "0s"))  # promql_parser refuses zero durations.
            zero = re.fullmatch(r"0|(0+(ms|[smhdwy]))+", hold)
            for_ms = 0 if zero else pp.parse_duration(hold) // timedelta(milliseconds=1)
            rules.append(AlertRule(r["alert"], str(r["expr"]), for_ms, labels))
            _parse(rules[-1].expr)  # A bad expression fails here, not at a step.
    return rules


def _alert_states(rules: Sequence[AlertRule], st: _Store, times: range) -> dict:
    active: dict[tuple[int, Labels], int] = {}  # when each alert became active
    states = {}
    for at in times:
        now, alerts = {}, []
        for i, rule in enumerate(rules):
            for k in _vec(_Query(st, at).eval(_parse(rule.expr))):
                labels = dict(_unnamed(k)) | rule.labels | {"alertname": rule.name}
                key = (i, frozenset((n, v) for n, v in labels.items() if v))
                if key in now:
                    raise ValueError(f"duplicate alert labelset in {rule.name}")
                # A gone alert is resolved: when back, it is pending anew.
                now[key] = active.get(key, at)
                state = "firing" if at - now[key] >= rule.for_ms else "pending"
                alerts.append((rule.name, key[1], state))
        active, states[at] = now, sorted(alerts, key=lambda a: (a[0], sorted(a[1])))
    return states


def alert_states(
    rules: Sequence[AlertRule], samples: Samples, start: float, end: float, step: float
) -> dict[float, list[Alert]]:
    """Evaluates the rules at start, start + step, ..., end as the rule manager.

    Returns:
        For each time, its (alertname, alert labels, "pending"|"firing") alerts.
    """
    times = range(_ms(start), _ms(end) + 1, _ms(step))
    states = _alert_states(rules, _store(samples), times)
    return {at / 1000: alerts for at, alerts in states.items()}


def find_promtool() -> str | None:
    """Returns $PROMTOOL, else promtool on PATH, else ~/go/bin/promtool, if any."""
    home = str(Path.home() / "go/bin/promtool")
    for path in (os.environ.get("PROMTOOL"), shutil.which("promtool"), home):
        if path and Path(path).is_file() and os.access(path, os.X_OK):
            return path
    return None


def run_promtool(
    test_file: str | Path, promtool: str | None = None
) -> subprocess.CompletedProcess:
    """Runs `promtool test rules test_file`, capturing its output."""
    cmd = [promtool or find_promtool() or "promtool", "test", "rules", str(test_file)]
    return subprocess.run(cmd, capture_output=True, text=True, check=False)


def _labels_text(k: Labels) -> str:
    pairs = (f"{n}={json.dumps(v, ensure_ascii=False)}" for n, v in sorted(k))
    return "{" + ", ".join(pairs) + "}"


def _expr_tests(expr: str, st: _Store, times: Sequence[int]) -> list[dict]:
    tests = []
    for at in times:
        result, exprs = _Query(st, at).eval(_parse(expr)), [expr]
        # promtool compares with ==, where NaN never matches: check NaNs
        # through queries whose results are free of them.
        if isinstance(result, float) and math.isnan(result):
            exprs = [f"({expr}) >= bool -Inf"]
        elif any(math.isnan(v) for v in _vec(result).values()):
            nan = f"({expr}) unless ({expr}) >= -Inf"
            exprs = [f"({expr}) >= -Inf", f"count without () ({nan})"]
        for e in exprs:
            vec = _vec(_Query(st, at).eval(_parse(e)))
            exp = [
                {"labels": _labels_text(k), "value": vec[k]}
                for k in sorted(vec, key=sorted)
            ]
            tests.append({"expr": e, "eval_time": f"{at}ms", "exp_samples": exp})
    return tests


def write_promtool_test(
    rules_path: str | Path | None,
    samples: Samples,
    interval: float,
    eval_times: Sequence[float],
    out_path: str | Path,
    *,
    evaluation_interval: float | None = None,
    exprs: Sequence[str] = (),
) -> Path:
    """Writes a promtool unit test that expects this module's own results.

    Each alert's firing set and each rule's and extra (panel) expression are
    checked at each eval time (unix times on the evaluation_interval grid).
    Samples must lie on the `interval` grid from the earliest one, promtool's
    time 0. The rules are copied beside out_path without their annotations,
    which promtool would compare too.
    """
    st, out_path = _store(samples), Path(out_path)
    t0, iv = min(t[0] for t, _ in st.values()), _ms(interval)
    step = _ms(evaluation_interval) if evaluation_interval else iv
    # Evaluate the data as promtool sees it, from 0, so that time() agrees.
    st = {k: ([ti - t0 for ti in t], v) for k, (t, v) in st.items()}
    times = sorted(_ms(e) - t0 for e in eval_times)
    off_grid = any(ti % iv for t, _ in st.values() for ti in t)
    if off_grid or any(at < 0 or at % step for at in times):
        raise ValueError(f"samples need a {iv}ms grid, eval times {step}ms, from t0")
    series = []
    for k in sorted(st, key=sorted):
        values = ["_"] * (st[k][0][-1] // iv + 1)
        for ti, v in zip(*st[k]):
            text = "NaN" if math.isnan(v) else repr(v)
            values[ti // iv] = {math.inf: "Inf", -math.inf: "-Inf"}.get(v, text)
        series.append({"series": _labels_text(k), "values": " ".join(values)})
    test: dict = {"interval": f"{iv}ms", "input_series": series}
    doc = {"rule_files": [], "evaluation_interval": f"{step}ms", "tests": [test]}
    rules = load_rules(rules_path) if rules_path else []
    if rules_path:
        raw = yaml.safe_load(Path(rules_path).read_text())
        for rule in (r for g in raw["groups"] for r in g["rules"]):
            rule.pop("annotations", None)
        copy = out_path.with_name(out_path.stem + ".rules.yml")
        copy.write_text(yaml.safe_dump(raw, sort_keys=False))
        doc["rule_files"] = [copy.name]
        states = _alert_states(rules, st, range(0, times[-1] + 1, step))
        test["alert_rule_test"] = [
            {"eval_time": f"{at}ms", "alertname": name, "exp_alerts": [
                {"exp_labels": dict(sorted(k - {("alertname", name)}))}
                for a, k, s in states[at] if a == name and s == "firing"
            ]}
            for at in times
            for name in dict.fromkeys(r.name for r in rules)
        ]  # fmt: skip
    exprs = [*(r.expr for r in rules), *exprs]
    test["promql_expr_test"] = [c for e in exprs for c in _expr_tests(e, st, times)]
    out_path.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))
    return out_path
