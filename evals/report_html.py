"""The gate report as one self-contained HTML page: a chart per metric (inline SVG, candidate
against control), the gate's failures, the failing cases and the critical differences. No
scripts, fonts, styles or images are fetched from anywhere."""

from __future__ import annotations

from html import escape
from typing import Any

from toolgate.evals.redaction import redacted_report

CHARTS: tuple[tuple[str, str, str], ...] = (
    ("tool_selection_top1", "Tool selection (top-1)", "%"),
    ("no_tool_precision", "No-tool precision", "%"),
    ("argument_valid", "Arguments valid", "%"),
    ("approval_bypasses", "Approval bypasses", "count"),
    ("cross_tenant_access", "Cross-tenant access", "count"),
    ("duplicate_effects", "Duplicate effects", "count"),
    ("dangerous_false_positives", "Dangerous false positives", "count"),
    ("critical_failed", "Critical cases failed", "count"),
    ("tool_calls_per_task", "Tool calls per task", "number"),
    ("tokens_per_task", "Tokens per task", "number"),
)
COLORS = {"candidate": "#2563eb", "control": "#9ca3af"}
STYLE = """
body{font-family:system-ui,sans-serif;margin:2rem;color:#111}
h1{font-size:1.4rem}.pass{color:#15803d}.fail{color:#b91c1c}
.charts{display:flex;flex-wrap:wrap;gap:1rem}
figure{margin:0;border:1px solid #e5e7eb;padding:.5rem;border-radius:6px}
figcaption{font-size:.85rem;font-weight:600}
table{border-collapse:collapse;font-size:.85rem;margin:1rem 0}
td,th{border:1px solid #e5e7eb;padding:.25rem .5rem;text-align:left;vertical-align:top}
code{font-size:.8rem}
"""


def bar_chart(title: str, unit: str, values: dict[str, float | None]) -> str:
    """One inline SVG bar chart of ``values`` (label -> number; None is drawn as n/a)."""
    width, height, bar = 260, 120, 70
    numbers = [v for v in values.values() if v is not None]
    top = 100.0 if unit == "%" else max([*numbers, 1.0])
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height + 30}" '
        f'role="img" aria-label="{escape(title)}">'
    ]
    for index, (label, value) in enumerate(values.items()):
        x = 30 + index * (bar + 40)
        shown = 0.0 if value is None else float(value)
        h = 0 if top == 0 else round(height * shown / top)
        text = "n/a" if value is None else (f"{shown:.1f}%" if unit == "%" else f"{shown:g}")
        parts.append(
            f'<rect x="{x}" y="{height - h}" width="{bar}" height="{h}" fill="{COLORS.get(label, "#6b7280")}"/>'
            f'<text x="{x + bar / 2}" y="{max(height - h - 4, 12)}" font-size="12" text-anchor="middle">{text}</text>'
            f'<text x="{x + bar / 2}" y="{height + 18}" font-size="12" text-anchor="middle">{escape(label)}</text>'
        )
    parts.append(f'<line x1="20" y1="{height}" x2="{width - 10}" y2="{height}" stroke="#111"/></svg>')
    return "".join(parts)


def _rows(headers: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def render_html(report: dict[str, Any]) -> str:
    """The HTML page of a JSON report (`toolgate.evals.report.build_report`), redacted like the
    report itself (`toolgate.evals.redaction.redacted_report`: a report written before reports were
    redacted, or edited, shows no secret either)."""
    report = redacted_report(report)
    gate, candidate, control = report["gate"], report["candidate"], report.get("control")
    runs = {"candidate": candidate["metrics"]}
    if control:
        runs["control"] = control["metrics"]
    charts = "".join(
        f"<figure><figcaption>{escape(title)}</figcaption>"
        f"{bar_chart(title, unit, {name: m.get(key) for name, m in runs.items()})}</figure>"
        for key, title, unit in CHARTS
    )
    verdict = "PASS" if gate["passed"] else "FAIL"
    failing = [
        [c["id"], c["category"], "yes" if c["critical"] else "", "; ".join(c["reasons"][:3])]
        for c in candidate["cases"]
        if not c["passed"]
    ]
    diffs = [
        [
            d["case_id"],
            "yes" if d["critical"] else "",
            ", ".join(d["changed"]),
            "; ".join(d["control_reasons"][:2]),
        ]
        for d in report["differences"]
    ]
    releases = [
        [candidate["release"], candidate["manifest_sha256"], candidate["manifest_status"], "candidate"]
    ]
    if control:
        releases.append(
            [control["release"], control["manifest_sha256"], control["manifest_status"], "control"]
        )
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>toolgate release gate: {escape(candidate['release'])}</title><style>{STYLE}</style></head><body>"
        f"<h1>Release gate <span class='{verdict.lower()}'>{verdict}</span>: {escape(candidate['release'])}</h1>"
        f"<p><code>{escape(gate['summary'])}</code></p>"
        f"<p>model <code>{escape(str(report.get('model', 'scripted')))}</code>; "
        f"dataset {escape(report['dataset']['name'])} <code>{escape(report['dataset']['sha256'])}</code>; "
        f"report digest <code>{escape(report['digest'])}</code>; generated {escape(report['generated_at'])}</p>"
        + _rows(["release", "manifest sha256", "manifest", "role"], releases)
        + "<h2>Gate failures</h2>"
        + (_rows(["reason"], [[f] for f in gate["failures"]]) if gate["failures"] else "<p>none</p>")
        + f"<h2>Metrics</h2><div class='charts'>{charts}</div>"
        + "<h2>Failing candidate cases</h2>"
        + (_rows(["case", "category", "critical", "reasons"], failing) if failing else "<p>none</p>")
        + "<h2>Differences from the control</h2>"
        + (_rows(["case", "critical", "changed", "control reasons"], diffs) if diffs else "<p>none</p>")
        + "</body></html>\n"
    )


__all__ = ["CHARTS", "bar_chart", "render_html"]
