#!/usr/bin/env python3
"""Checks that the shipped alerting rules and Grafana dashboard ask only for what the gateway exports.

Starts the real gateway with the admin endpoint on and one library served by the test worker, runs
keywords through it with robot-jsonrpc-cli (so that every labelled series exists, with counts), fetches
/metrics, and checks every PromQL expression of deploy/prometheus/*.rules.yml and of the dashboard
(panels, annotations, variable queries) against that answer:

  - each metric name is a sample name in it (a name ending in _bucket, _sum or _count needs its family
    TYPE histogram), or `up`, which Prometheus writes itself;
  - each label a selector matches on is a label of that metric (or job/instance, which the scrape adds),
    and each value it matches exactly (or each word of a `a|b` regex) is a value /metrics has;
  - each label of a `by (...)`/`on (...)` clause is a label of one of the expression's metrics;
  - each dashboard expression parses (promtool check rules, its variables given a value);
  - the dashboard is a Grafana dashboard of the current schema: a datasource variable that every panel,
    target and query variable uses, unique panel ids, gridPos on the 24-column grid without overlaps,
    only variables it defines.

Then it proves it can fail: a few wrong expressions (a misspelt name, a counter used as a histogram, a
label value the gateway never writes, a grouping label that does not exist, a metric of another
exporter) must each be reported. Exits 1 naming each problem. The ctest test monitoring.metric_names
runs it (tests/monitoring/CMakeLists.txt); by hand:

  tests/monitoring/check_metric_names.py --gateway build/bin/robot-jsonrpc-gateway \
      --cli build/bin/robot-jsonrpc-cli --worker build/bin/robot-test-worker \
      --rules deploy/prometheus/robot-jsonrpc-gateway.rules.yml --dashboard deploy/grafana/robot-jsonrpc-gateway.json

RJG_BIN_DIR, as for the integration tests, takes the three programs from another build directory.
Needs python3 and python3-yaml (deploy/install-deps.sh installs both).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from gateway_process import http_get, running_gateway  # noqa: E402

try:
    import yaml
except ImportError:
    sys.exit("FAIL: python3 cannot import yaml: install python3-yaml (deploy/install-deps.sh does)")

# Written by Prometheus for every scrape, not by the gateway; and the labels every scrape adds.
PROMETHEUS_METRICS = {"up": {"job", "instance"}}
TARGET_LABELS = {"job", "instance"}
# Grafana's own variables an expression may use besides the dashboard's.
GRAFANA_VARIABLES = {"__rate_interval", "__interval", "__range", "__rate_interval_ms", "__interval_ms", "__range_s"}
GROUPING = {"by", "without", "on", "ignoring", "group_left", "group_right"}
KEYWORDS = {"and", "or", "unless", "bool", "offset", "atan2", "inf", "nan"}
# Aggregations may put their grouping clause between the name and the parenthesis: `sum by (l) (x)`.
AGGREGATIONS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk",
                "quantile"}
PANEL_TYPES = {"row", "timeseries", "stat", "gauge", "bargauge", "table", "heatmap", "text", "state-timeline"}


# --- /metrics ----------------------------------------------------------------------------------------

class Exposition:
    """The sample names of a text-format answer, the labels and values of each, and each family's TYPE."""

    def __init__(self, text):
        self.types = {}
        self.labels = {}  # sample name -> {label: {values}}
        label_re = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
        for line in text.splitlines():
            if line.startswith("# TYPE "):
                _, _, name, kind = line.split(" ", 3)
                self.types[name] = kind
                continue
            if not line or line.startswith("#"):
                continue
            m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s", line)
            if not m:
                raise ValueError(f"/metrics: a line that is no sample: {line!r}")
            seen = self.labels.setdefault(m.group(1), {})
            for label, value in label_re.findall(m.group(3) or ""):
                seen.setdefault(label, set()).add(value)

    def family_type(self, name):
        for suffix in ("_bucket", "_sum", "_count"):
            if name.endswith(suffix) and name[: -len(suffix)] in self.types:
                return name[: -len(suffix)], self.types[name[: -len(suffix)]]
        return name, self.types.get(name)


# --- PromQL, as far as names and labels go -----------------------------------------------------------

def selectors(expr):
    """The vector selectors of a PromQL expression: [(metric, [(label, op, value)])], and the label names
    of its grouping clauses. Strings, ranges ([5m], [1h:1m]), numbers, functions, aggregations, keywords
    and Grafana variables are skipped."""
    found, grouping, i, n = [], [], 0, len(expr)

    def skip_string(j):
        quote, j = expr[j], j + 1
        while j < n and expr[j] != quote:
            j += 2 if expr[j] == "\\" and quote != "`" else 1
        return j + 1

    def matchers(j):  # expr[j] == "{"; returns (matchers, index after "}")
        out, j = [], j + 1
        while True:
            m = re.compile(r'\s*,?\s*(\}|([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)")').match(expr, j)
            if not m:
                raise ValueError(f"cannot read the label matchers at {expr[j:j + 40]!r} in {expr!r}")
            j = m.end()
            if m.group(1) == "}":
                return out, j
            out.append((m.group(2), m.group(3), m.group(4)))

    while i < n:
        c = expr[i]
        if c.isspace():
            i += 1
        elif c in "\"'`":
            i = skip_string(i)
        elif c == "#":
            j = expr.find("\n", i)  # a comment, to the end of its line
            i = n if j < 0 else j
        elif c == "[":
            i = expr.index("]", i) + 1
        elif c == "$":
            m = re.compile(r"\$\{?[a-zA-Z0-9_]+(:[a-z]+)?\}?").match(expr, i)
            i = m.end() if m else i + 1
        elif c == "{":
            ms, i = matchers(i)
            found.append((None, ms))
        elif c.isdigit() or (c == "." and i + 1 < n and expr[i + 1].isdigit()):
            i = re.compile(r"[0-9.][0-9a-zA-Z._]*").match(expr, i).end()
        elif c.isalpha() or c in "_:":
            m = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*").match(expr, i)
            word, i = m.group(0), m.end()
            j = i
            while j < n and expr[j].isspace():
                j += 1
            nxt = expr[j] if j < n else ""
            if word.lower() in GROUPING:
                if nxt == "(":
                    end = expr.index(")", j)
                    grouping += [w.strip() for w in expr[j + 1:end].split(",") if w.strip()]
                    i = end + 1
            elif word.lower() in KEYWORDS or word in AGGREGATIONS or nxt == "(":
                pass  # an operator, or a function or aggregation (its arguments follow)
            elif nxt == "{":
                ms, i = matchers(j)
                found.append((word, ms))
            else:
                found.append((word, []))
        else:
            i += 1
    return found, grouping


def check_expression(where, expr, exposition, variables):
    """The problems of one expression, as lines naming `where`."""
    problems = []
    try:
        found, grouping = selectors(expr)
    except ValueError as e:
        return [f"{where}: {e}"]
    if not found:
        problems.append(f"{where}: no metric in {expr!r}")
    names = set()
    for name, matchers in found:
        if name is None:
            problems.append(f"{where}: a selector without a metric name in {expr!r}: name the metric")
            continue
        if name in PROMETHEUS_METRICS:
            labels = {label: None for label in PROMETHEUS_METRICS[name]}
        elif name in exposition.labels:
            family, kind = exposition.family_type(name)
            if family != name and kind != "histogram" and not (kind == "summary" and not name.endswith("_bucket")):
                problems.append(f"{where}: {name} needs {family} to be a histogram; /metrics says TYPE {kind}")
            labels = exposition.labels[name]
        else:
            family, kind = exposition.family_type(name)
            hint = f" ({family} is TYPE {kind})" if kind else ""
            problems.append(f"{where}: metric {name} is not in the gateway's /metrics{hint}: use a name the gateway "
                            f"exports (doc/operations.md, GET /metrics)")
            continue
        names.add(name)
        for label, op, value in matchers:
            if label == "__name__":
                problems.append(f"{where}: matches on __name__: name the metric instead")
                continue
            if label in TARGET_LABELS:
                continue
            if label not in labels:
                problems.append(f"{where}: {name} has no label {label!r} (it has: {', '.join(sorted(labels)) or 'none'})")
                continue
            if "$" in value or op.startswith("!"):
                continue  # a dashboard variable, or a negative match: any value is meaningful
            exported = labels[label] or set()
            words = [value] if op == "=" else (value.split("|") if re.fullmatch(r"[A-Za-z0-9_|]+", value) else None)
            if words is None:
                if not any(re.fullmatch(value, v) for v in exported):
                    problems.append(f"{where}: {name}{{{label}=~{value!r}}} matches no value /metrics has "
                                    f"({', '.join(sorted(exported))})")
            else:
                for w in words:
                    if w not in exported:
                        problems.append(f"{where}: {name} never has {label}={w!r} (values: {', '.join(sorted(exported))})")
    known_labels = set(TARGET_LABELS)
    for name in names:
        known_labels |= set(PROMETHEUS_METRICS.get(name, ())) | set(exposition.labels.get(name, {}))
    for label in grouping:
        if label not in known_labels:
            problems.append(f"{where}: groups by {label!r}, a label none of {', '.join(sorted(names))} has")
    for var in re.findall(r"\$\{?([a-zA-Z0-9_]+)", expr):
        if var not in variables and var not in GRAFANA_VARIABLES:
            problems.append(f"{where}: uses ${var}, which the dashboard does not define")
    return problems


# --- The files ---------------------------------------------------------------------------------------

def rule_expressions(path):
    with open(path, encoding="utf-8") as f:
        doc = yaml.safe_load(f)
    out = []
    for group in doc["groups"]:
        for rule in group["rules"]:
            out.append((f"{os.path.basename(path)}: {rule.get('alert') or rule.get('record')}", rule["expr"]))
    return out


def dashboard_expressions(path):
    """The dashboard's PromQL expressions, and its structural problems."""
    with open(path, encoding="utf-8") as f:
        board = json.load(f)
    base = os.path.basename(path)
    out, problems = [], []
    for key in ("title", "uid", "schemaVersion", "panels", "templating"):
        if key not in board:
            problems.append(f"{base}: no {key!r}: a Grafana dashboard needs it")
    if not isinstance(board.get("schemaVersion"), int) or board.get("schemaVersion", 0) < 36:
        problems.append(f"{base}: schemaVersion {board.get('schemaVersion')!r}: export it from Grafana 10 or later (36+)")
    if len(board.get("uid", "")) > 40:
        problems.append(f"{base}: uid longer than Grafana's 40 characters")
    variables = {v.get("name"): v for v in board.get("templating", {}).get("list", [])}
    sources = [v for v in variables.values() if v.get("type") == "datasource" and v.get("query") == "prometheus"]
    if not sources:
        problems.append(f"{base}: no datasource variable of type prometheus: add one so that users pick their Prometheus")
    ds_ref = {"type": "prometheus", "uid": "${%s}" % (sources[0]["name"] if sources else "datasource")}

    def uses_variable(where, ds):
        if ds != ds_ref:
            problems.append(f"{where}: datasource {ds!r}, not the datasource variable {ds_ref!r}")

    for name, var in variables.items():
        if var.get("type") == "query":
            uses_variable(f"{base}: variable {name}", var.get("datasource"))
            query = var.get("query")
            query = query.get("query") if isinstance(query, dict) else query
            m = re.fullmatch(r"\s*label_values\((.*),\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)\s*", query or "")
            if not m:
                problems.append(f"{base}: variable {name}: query {query!r} is not label_values(SELECTOR, LABEL)")
                continue
            out.append((f"{base}: variable {name}", m.group(1)))
            out.append((f"{base}: variable {name} (its label)", f"{m.group(1).split('{')[0]}{{{m.group(2)}!=\"\"}}"))
    for i, ann in enumerate(board.get("annotations", {}).get("list", [])):
        if "expr" in ann:
            uses_variable(f"{base}: annotation {ann.get('name')}", ann.get("datasource"))
            out.append((f"{base}: annotation {ann.get('name')}", ann["expr"]))

    panels = []
    for p in board.get("panels", []):
        panels.append(p)
        panels += p.get("panels", [])
    ids, cells = set(), {}
    for p in panels:
        where = f"{base}: panel {p.get('id')} {p.get('title')!r}"
        if not isinstance(p.get("id"), int) or p["id"] in ids:
            problems.append(f"{where}: panel ids must be unique integers")
        ids.add(p.get("id"))
        if p.get("type") not in PANEL_TYPES:
            problems.append(f"{where}: type {p.get('type')!r} is not a core Grafana panel")
        g = p.get("gridPos", {})
        if not all(isinstance(g.get(k), int) for k in "hwxy") or g["x"] < 0 or g["w"] < 1 or g["x"] + g["w"] > 24:
            problems.append(f"{where}: gridPos {g} is not on the 24-column grid")
            continue
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                if (x, y) in cells:
                    problems.append(f"{where}: overlaps panel {cells[(x, y)]}")
                    break
                cells[(x, y)] = p.get("id")
            else:
                continue
            break
        if p.get("type") == "row":
            continue
        uses_variable(where, p.get("datasource"))
        refs = [t.get("refId") for t in p.get("targets", [])]
        if not refs or len(set(refs)) != len(refs):
            problems.append(f"{where}: needs targets with distinct refIds")
        for t in p.get("targets", []):
            uses_variable(f"{where} target {t.get('refId')}", t.get("datasource"))
            out.append((f"{where} target {t.get('refId')}", t.get("expr", "")))
    return out, problems, set(variables)


# --- The gateway -------------------------------------------------------------------------------------

def live_metrics(gateway, cli, worker):
    """/metrics of a real gateway after an import, a passing and a failing keyword."""
    def config(port, admin):
        return (f'[gateway]\nlisten = ["tcp://127.0.0.1:{port}"]\nlog_level = "info"\n\n'
                f'[admin]\nlisten = ["tcp://127.0.0.1:{admin}"]\n\n'
                f'[[library]]\nname = "TestLibrary"\ncommand = ["{worker}", "--name", "TestLibrary"]\n')

    with running_gateway(gateway, config, "rjg-metric-names.") as g:
        server = f"tcp://127.0.0.1:{g.port}"
        for args, code in ((["run", "TestLibrary", "Echo", "hello"], 0), (["run", "TestLibrary", "Fail", "boom"], 1)):
            r = subprocess.run([cli, "--server", server] + args, capture_output=True, text=True, timeout=60)
            if r.returncode != code:
                raise RuntimeError(f"robot-jsonrpc-cli {' '.join(args)} exited {r.returncode}, expected {code}:\n"
                                   f"{r.stdout}{r.stderr}")
        status, _, text = http_get(f"http://127.0.0.1:{g.admin}/metrics")
        if status != 200:
            raise RuntimeError(f"/metrics answered {status}")
        return text


def promql_syntax(expressions, variables):
    """promtool's parser over the dashboard's expressions (its variables given a value): its complaints."""
    values = {"__rate_interval": "5m", "__interval": "1m", "__range": "1h", "__rate_interval_ms": "300000",
              "__interval_ms": "60000", "__range_s": "3600"}
    rules = []
    for i, (where, expr) in enumerate(expressions):
        text = re.sub(r"\$\{?([a-zA-Z0-9_]+)\}?", lambda m: values.get(m.group(1), ".+"), expr)
        rules.append({"record": f"dashboard:expression_{i}", "expr": text})
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
        yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, f)
    try:
        r = subprocess.run(["promtool", "check", "rules", f.name], capture_output=True, text=True)
    except FileNotFoundError:
        return ["promtool is missing: install the Debian package prometheus (deploy/install-deps.sh does)"]
    finally:
        os.unlink(f.name)
    if r.returncode == 0:
        return []
    problems = []
    for line in (r.stdout + r.stderr).splitlines():
        m = re.search(r"expression_(\d+)\": (.*)", line)
        if m:
            problems.append(f"{expressions[int(m.group(1))][0]}: promtool: {m.group(2)}")
    return problems or [f"promtool check rules failed on the dashboard's expressions:\n{r.stdout}{r.stderr}"]


# Expressions the check must refuse, each with the words its report must contain.
MUST_FAIL = [
    ("rate(robot_jsonrpc_gateway_keyword_total[5m])", "robot_jsonrpc_gateway_keyword_total is not in"),
    ("histogram_quantile(0.9, rate(robot_jsonrpc_gateway_keywords_total_bucket[5m]))", "not in the gateway's /metrics"),
    ('robot_jsonrpc_gateway_workers{state="running"}', "never has state='running'"),
    ('robot_jsonrpc_gateway_worker_exits_total{reason=~"crash|oom"}', "never has reason='oom'"),
    ('robot_jsonrpc_gateway_imports_waiting{lib="X"}', "has no label 'lib'"),
    ("sum by (lib) (robot_jsonrpc_gateway_workers)", "groups by 'lib'"),
    ("node_memory_MemAvailable_bytes", "node_memory_MemAvailable_bytes is not in"),
    ('robot_jsonrpc_gateway_sessions_open{instance=~"$gateway"}', "uses $gateway"),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for opt in ("gateway", "cli", "worker", "rules", "dashboard"):
        ap.add_argument("--" + opt, required=True)
    args = ap.parse_args()
    bin_dir = os.environ.get("RJG_BIN_DIR")
    programs = [os.path.abspath(os.path.join(bin_dir, os.path.basename(p)) if bin_dir else p)
                for p in (args.gateway, args.cli, args.worker)]

    exposition = Exposition(live_metrics(*programs))
    expressions, problems, variables = dashboard_expressions(args.dashboard)
    problems += promql_syntax(expressions, variables)
    expressions += rule_expressions(args.rules)
    for where, expr in expressions:
        problems += check_expression(where, expr, exposition, variables)

    used = set()
    for _, expr in expressions:
        used |= {name for name, _ in selectors(expr)[0] if name}
    print(f"checked {len(expressions)} expressions against /metrics ({len(exposition.labels)} sample names): "
          f"they use {len(used)} metrics: {', '.join(sorted(used))}", flush=True)

    for expr, words in MUST_FAIL:
        found = check_expression("self-test", expr, exposition, variables)
        if not any(words in p for p in found):
            problems.append(f"self-test: {expr!r} must be reported with {words!r}; the check said {found}")
    for p in problems:
        print("FAIL: " + p, file=sys.stderr)
    if problems:
        print(f"{len(problems)} problem(s)", file=sys.stderr)
        return 1
    print(f"ok: every metric and label of {os.path.basename(args.rules)} and {os.path.basename(args.dashboard)} "
          f"is in a live /metrics; {len(MUST_FAIL)} wrong expressions are refused")
    return 0


if __name__ == "__main__":
    sys.exit(main())
