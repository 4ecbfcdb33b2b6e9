"""The Grafana dashboard is valid and only queries metrics that something really emits.

Our metric names come from :data:`hango.telemetry.METRICS`, translated the way the
collector's Prometheus exporter does (prometheus/otlptranslator, suffixes on): name
tokens joined by ``_``, the unit appended (``s`` → ``seconds``; ``1`` and ``{...}``
units add nothing), ``_total`` for counters, ``_bucket``/``_sum``/``_count`` series for
histograms. Flower's names come from Flower's own metric objects.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from flower.events import get_prometheus_metrics

from hango.telemetry import names as t

ROOT = Path(__file__).resolve().parents[3]
OBSERVABILITY = ROOT / "observability"
DASHBOARD = OBSERVABILITY / "grafana" / "dashboards" / "hango-context.json"

# The subset of otlptranslator's unit map our units can use.
UNIT_SUFFIXES = {"s": "seconds", "ms": "milliseconds", "By": "bytes", "1": "", "%": "percent"}
PROMQL_WORDS = {
    "sum", "min", "max", "avg", "count", "rate", "irate", "increase", "histogram_quantile",
    "clamp_min", "clamp_max", "topk", "bottomk", "abs", "by", "without", "on", "ignoring",
    "group_left", "group_right", "and", "or", "unless", "bool", "offset",
}  # fmt: skip
BUILTIN_LABELS = {"le", "job", "instance", "service_name"}


def prometheus_name(name: str, unit: str, kind: str) -> str:
    assert "/" not in unit, "per-units are not ported here"
    tokens = [token for token in re.split(r"[^A-Za-z0-9:]+", name) if token]
    suffix = "" if "{" in unit else UNIT_SUFFIXES.get(unit, unit)
    if suffix and suffix not in tokens:
        tokens.append(suffix)
    if kind == "counter":
        tokens = [token for token in tokens if token != "total"] + ["total"]
    return "_".join(tokens)


def series(base: str, kind: str) -> set[str]:
    if kind == "histogram":
        return {base + "_bucket", base + "_sum", base + "_count"}
    return {base}


def our_series() -> set[str]:
    return {
        name
        for spec in t.METRICS
        for name in series(prometheus_name(spec.name, spec.unit, spec.kind), spec.kind)
    }


def flower_metrics() -> list[Any]:
    holder = get_prometheus_metrics()
    return [m for m in vars(holder).values() if hasattr(m, "describe")]


def flower_series() -> set[str]:
    names: set[str] = set()
    for metric in flower_metrics():
        for family in metric.describe():
            base = family.name + ("_total" if family.type == "counter" else "")
            names |= series(base, family.type)
    return names


def known_labels() -> set[str]:
    attributes = {
        value.replace(".", "_")
        for key, value in vars(t).items()
        if isinstance(value, str)
        and (key.startswith(("GEN_AI_", "HANGO_")) or key in ("ERROR_TYPE", "METRIC_REASON"))
    }
    flower = {label for metric in flower_metrics() for label in metric._labelnames}
    return attributes | flower | BUILTIN_LABELS


def metric_names(expr: str) -> set[str]:
    stripped = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    stripped = re.sub(r"\{[^}]*\}", "", stripped)
    stripped = re.sub(r"\[[^\]]*\]", "", stripped)
    stripped = re.sub(r"\b(?:by|without|on|ignoring)\s*\([^)]*\)", "", stripped)
    identifiers = re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", stripped)
    return {name for name in identifiers if name not in PROMQL_WORDS}


def label_names(expr: str, legend: str) -> set[str]:
    labels = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", legend))
    for group in re.findall(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)", expr):
        labels |= {label.strip() for label in group.split(",") if label.strip()}
    for matchers in re.findall(r"\{([^}]*)\}", expr):
        labels |= set(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", matchers))
    return labels


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def targets(datasource_type: str) -> list[dict[str, Any]]:
    return [
        target
        for panel in dashboard()["panels"]
        for target in panel.get("targets", [])
        if target["datasource"]["type"] == datasource_type
    ]


def prometheus_queries() -> list[tuple[str, str]]:
    return [(target["expr"], target.get("legendFormat", "")) for target in targets("prometheus")]


# -- the translation itself, against otlptranslator's documented examples ---------------------


@pytest.mark.parametrize(
    ("name", "unit", "kind", "expected"),
    [
        ("http.server.request.duration", "s", "histogram", "http_server_request_duration_seconds"),
        ("requests.count", "1", "counter", "requests_count_total"),
        ("memory.usage", "By", "gauge", "memory_usage_bytes"),
        ("gen_ai.client.token.usage", "{token}", "histogram", "gen_ai_client_token_usage"),
        ("hango.cache.read_ratio", "1", "histogram", "hango_cache_read_ratio"),
    ],
)
def test_prometheus_translation(name: str, unit: str, kind: str, expected: str) -> None:
    assert prometheus_name(name, unit, kind) == expected


# -- the dashboard -----------------------------------------------------------------------------


def test_dashboard_is_valid_grafana_json() -> None:
    board = dashboard()
    assert board["uid"] == "hango-context"
    assert board["title"]
    panels = board["panels"]
    assert len({panel["id"] for panel in panels}) == len(panels)
    provisioned = (OBSERVABILITY / "grafana/provisioning/datasources/datasources.yaml").read_text()
    uids = set(re.findall(r"^\s*uid:\s*(\S+)\s*$", provisioned, re.MULTILINE))
    assert uids == {"prometheus", "tempo"}
    for panel in panels:
        assert panel["datasource"]["uid"] in uids, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] in uids
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24


def test_every_queried_metric_is_emitted() -> None:
    emitted = our_series() | flower_series()
    queried: set[str] = set()
    for expr, _ in prometheus_queries():
        names = metric_names(expr)
        assert names, f"no metric in {expr!r}"
        queried |= names
    assert queried - emitted == set()
    assert queried & our_series()


def test_every_grouping_and_legend_label_exists() -> None:
    allowed = known_labels()
    for expr, legend in prometheus_queries():
        assert label_names(expr, legend) - allowed == set(), expr


def test_dashboard_covers_the_layer() -> None:
    exprs = " ".join(expr for expr, _ in prometheus_queries())
    assert "sum by (reason) (rate(hango_context_compactions_total" in exprs
    assert "hango_context_input_tokens_bucket" in exprs
    assert "hango_context_evicted_messages_bucket" in exprs
    assert "hango_cache_read_ratio_sum" in exprs
    assert 'gen_ai_client_token_usage_sum{hango_call_purpose="summarize"}' in exprs
    assert "hango_queue_wait_duration_seconds_bucket" in exprs


def test_trace_queries_name_attributes_the_code_sets() -> None:
    attributes = {value for key, value in vars(t).items() if key.startswith(("GEN_AI_", "HANGO_"))}
    queries = [target["query"] for target in targets("tempo")]
    assert queries
    for query in queries:
        named = set(re.findall(r"\bspan\.([\w.]+)", query))
        assert named and named <= attributes, query


def test_prometheus_scrapes_the_collector_exporter_and_flower() -> None:
    scrape = (OBSERVABILITY / "prometheus.yml").read_text()
    collector = (OBSERVABILITY / "otel-collector.yaml").read_text()
    port = re.search(r"prometheus:\s*\n\s*endpoint:\s*0\.0\.0\.0:(\d+)", collector)
    assert port is not None
    assert f'"otel-collector:{port.group(1)}"' in scrape
    assert '"flower:5555"' in scrape


def test_compose_mounts_these_files_where_the_services_read_them() -> None:
    import yaml

    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    assert {"otel-collector", "tempo", "prometheus", "grafana"} <= set(services)
    for name in ("otel-collector", "tempo", "prometheus", "grafana"):
        for volume in services[name].get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (ROOT / source).exists(), f"{name}: {source}"
    grafana_mounts = dict(v.split(":")[:2] for v in services["grafana"]["volumes"])
    provider = (OBSERVABILITY / "grafana/provisioning/dashboards/dashboards.yaml").read_text()
    assert f"path: {grafana_mounts['./observability/grafana/dashboards']}" in provider
    assert grafana_mounts["./observability/grafana/provisioning"] == "/etc/grafana/provisioning"
