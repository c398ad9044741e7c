"""Prometheus for `make run` (deployments/prometheus/): promtool accepts the scrape
config, the recording rules and their unit test; every metric the Grafana dashboard
and the recording rules read is one the app's real /metrics exports.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from deploy_testkit import MODEL, TINY_ENGINE

from deployments.api.standalone import background_server, standalone_app

ROOT = Path(__file__).resolve().parents[3]
PROM = ROOT / "deployments" / "prometheus"
DASHBOARDS = sorted((ROOT / "grafana").glob("*.json"))

# A scraped series (`penelope_tokens_total`) and a recording rule (`penelope:...`),
# not inside another name (`x:penelope_y:rate5m`).
METRIC = re.compile(r"(?<![\w:])penelope_[a-z0-9_]+")
RECORDED = re.compile(r"(?<![\w:])penelope:[a-zA-Z0-9_:]+")


def promtool(*args: str, cwd: Path) -> None:
    exe = shutil.which("promtool")
    if exe is None:
        pytest.skip("promtool is not installed: apt-get install prometheus")
    done = subprocess.run(
        [exe, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, f"promtool {' '.join(args)}:\n{done.stdout}\n{done.stderr}"


def test_promtool_checks_the_config_as_make_prometheus_loads_it() -> None:
    # From the repository root, as `make prometheus` runs; rule_files resolve
    # against the config's folder, and the check covers rules.yml too.
    promtool("check", "config", "deployments/prometheus/prometheus.yml", cwd=ROOT)


def test_promtool_checks_the_rules() -> None:
    promtool("check", "rules", "rules.yml", cwd=PROM)


def test_promtool_unit_tests_of_the_rules_pass() -> None:
    promtool("test", "rules", "rules_test.yml", cwd=PROM)


def load(name: str) -> Any:
    return yaml.safe_load((PROM / name).read_text())


def recording_rules() -> dict[str, str]:
    """rules.yml: record name -> expr."""
    return {r["record"]: r["expr"] for g in load("rules.yml")["groups"] for r in g["rules"]}


def test_the_scrape_config_targets_make_run_and_loads_the_rules() -> None:
    config = load("prometheus.yml")
    http = yaml.safe_load((ROOT / "serve_config.yaml").read_text())["http_options"]
    (job,) = config["scrape_configs"]
    targets = [t for s in job["static_configs"] for t in s["targets"]]
    assert targets == [f"{http['host']}:{http['port']}"]
    assert job.get("metrics_path", "/metrics") == "/metrics"
    assert config["rule_files"] == ["rules.yml"]


def test_the_unit_test_covers_every_recording_rule() -> None:
    spec = load("rules_test.yml")
    assert spec["rule_files"] == ["rules.yml"]
    tested = {t["expr"] for case in spec["tests"] for t in case["promql_expr_test"]}
    records = set(recording_rules())
    assert records and all(RECORDED.fullmatch(r) for r in records), records
    assert records <= tested, records - tested


def exposed_names(text: str) -> set[str]:
    """The series names Prometheus can ingest from a text exposition.

    Every sample's name, and what each `# TYPE` line declares, so that a family
    without samples yet (no evictions so far) still counts: a counter `x_total`
    (and `x_total` for a counter declared as `x`), a histogram `x_bucket`, `x_sum`
    and `x_count`, a summary `x`, `x_sum` and `x_count`, anything else `x`. A bare
    histogram name or a counter's name without `_total` is no series.
    """
    names: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(maxsplit=3)
            if kind == "counter":
                names.add(name if name.endswith("_total") else f"{name}_total")
            elif kind == "histogram":
                names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
            elif kind == "summary":
                names |= {name, f"{name}_sum", f"{name}_count"}
            else:
                names.add(name)
        elif line.strip() and not line.startswith("#"):
            names.add(re.split(r"[{\s]", line, maxsplit=1)[0])
    return names


SAMPLE_EXPOSITION = """\
# HELP penelope_tokens_total Prompt tokens.
# TYPE penelope_tokens_total counter
penelope_tokens_total{replica="r",source="new"} 3.0
# HELP penelope_evictions_total Evicted KV pages.
# TYPE penelope_evictions_total counter
# HELP penelope_ttft_seconds Time to first token.
# TYPE penelope_ttft_seconds histogram
penelope_ttft_seconds_bucket{le="+Inf",replica="r"} 1.0
penelope_ttft_seconds_count{replica="r"} 1.0
penelope_ttft_seconds_sum{replica="r"} 0.5
# TYPE penelope_queue_length gauge
penelope_queue_length{replica="r"} 0.0
"""


@pytest.mark.parametrize(
    ("name", "exposed"),
    [
        ("penelope_tokens_total", True),
        ("penelope_evictions_total", True),  # declared, no sample yet
        ("penelope_ttft_seconds_bucket", True),
        ("penelope_ttft_seconds_sum", True),
        ("penelope_queue_length", True),
        ("penelope_tokens", False),  # Prometheus stores the counter as _total
        ("penelope_ttft_seconds", False),  # a classic histogram has no bare series
        ("penelope_token_total", False),  # a typo
        ("penelope_pages", False),  # not in this exposition
    ],
)
def test_exposed_names_follow_prometheus_suffixes(name: str, exposed: bool) -> None:
    assert (name in exposed_names(SAMPLE_EXPOSITION)) is exposed


@pytest.fixture(scope="module")
def metrics_names() -> set[str]:
    """The names in the standalone app's real /metrics after one completion."""
    with background_server(standalone_app(TINY_ENGINE)) as url:
        body = {
            "model": MODEL,
            "messages": [{"role": "user", "content": "Count the cached tokens."}],
            "max_tokens": 4,
            "temperature": 0,
        }
        r = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120)
        assert r.status_code == 200, r.text
        metrics = httpx.get(f"{url}/metrics", timeout=30)
    assert metrics.status_code == 200
    names = exposed_names(metrics.text)
    assert "penelope_tokens_total" in names and "penelope_ttft_seconds_bucket" in names
    return names


def dashboard_exprs() -> Iterator[tuple[str, str]]:
    """(dashboard file, expr) for every `expr` anywhere in grafana/*.json."""

    def walk(node: Any) -> Iterator[str]:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "expr" and isinstance(value, str):
                    yield value
                else:
                    yield from walk(value)
        elif isinstance(node, list):
            for item in node:
                yield from walk(item)

    for path in DASHBOARDS:
        for expr in walk(json.loads(path.read_text())):
            yield path.name, expr


def test_every_metric_the_dashboard_queries_is_exported(metrics_names: set[str]) -> None:
    exprs = list(dashboard_exprs())
    assert DASHBOARDS and exprs
    queried = {(f, m) for f, e in exprs for m in METRIC.findall(e)}
    assert queried
    missing = sorted((f, m) for f, m in queried if m not in metrics_names)
    assert not missing, f"the dashboard queries metrics /metrics lacks: {missing}"
    records = set(recording_rules())
    undefined = sorted((f, r) for f, e in exprs for r in RECORDED.findall(e) if r not in records)
    assert not undefined, f"the dashboard queries rules rules.yml lacks: {undefined}"


def test_every_metric_the_recording_rules_read_is_exported(metrics_names: set[str]) -> None:
    rules = recording_rules()
    read = {m for expr in rules.values() for m in METRIC.findall(expr)}
    assert read
    assert not read - metrics_names, read - metrics_names
    undefined = {r for expr in rules.values() for r in RECORDED.findall(expr)} - set(rules)
    assert not undefined, undefined
