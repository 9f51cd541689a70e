"""What the gate prints and writes: the summary line, the critical differences between
candidate and control, cost per task, and a JSON report whose digest reviewers sign.

The JSON report is the reviewed artifact: ``digest`` is the SHA-256 of its canonical JSON without
that field, so a report edited after the run no longer matches and `toolgate evals review`
refuses it. The HTML report (`toolgate.evals.report_html`) is a view of the same data. The
report and the cost lines name the model the cases ran with (``model=scripted`` or
``model=openai:gpt-4.1-mini``), inside what the digest covers.

Reports leave the machine (attached to reviews, kept as release evidence), so they are redacted
the way tool output is (`toolgate.policy.output`): every string is scrubbed of secret-looking
values (keys, tokens, card numbers), and a case's input is redacted by key as well
(`toolgate.evals.redaction`). The digest is taken over the redacted body, so what reviewers sign is what
was written; the printed lines and the HTML view are redacted the same way.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from toolgate.canonical import digest
from toolgate.clock import iso, utcnow
from toolgate.evals.coverage import uncovered
from toolgate.evals.gate import GateResult, ReleaseRun
from toolgate.evals.redaction import redacted_report
from toolgate.policy.output import redact_text

REPORT_KIND = "toolgate.evals.report"
REPORT_SCHEMA_VERSION = 1


def _pct(value: Any) -> str:
    return "n/a" if value is None else f"{value:.1f}%"


def summary_line(result: GateResult) -> str:
    """``cases=... tool_selection_top1=...% ... derived_cases=... loosened=... uncovered=...
    human_reviewed_critical=n/m gate=PASS``. Dangerous false positives count the dataset's and
    the generated cases the candidate let further than the control (``loosened``)."""
    m = result.candidate.metrics()
    loosened = result.loosened()
    unsafe = result.unsafe_derived()
    dangerous = int(m["dangerous_false_positives"] or 0) + len(set(loosened) | set(unsafe))
    derived = ""
    if result.derived:
        missing = uncovered(result.coverage_table())
        derived = f"derived_cases={len(result.derived)} loosened={len(loosened)} uncovered={len(missing)} "
    return (
        f"cases={m['cases']} tool_selection_top1={_pct(m['tool_selection_top1'])} "
        f"no_tool_precision={_pct(m['no_tool_precision'])} argument_valid={_pct(m['argument_valid'])} "
        f"approval_bypasses={m['approval_bypasses']} cross_tenant_access={m['cross_tenant_access']} "
        f"duplicate_effects={m['duplicate_effects']} dangerous_false_positives={dangerous} {derived}"
        f"human_reviewed_critical={len(set(result.reviewed) & set(result.critical_ids))}/{len(result.critical_ids)} "
        f"gate={'PASS' if result.passed else 'FAIL'}"
    )


def coverage_lines(result: GateResult) -> list[str]:
    """The coverage table: one line per target of either release, with what demonstrated it."""
    out = []
    for row in result.coverage_table():
        status = "covered" if row.covered else ("UNCOVERED" if row.required else "not_covered")
        out.append(
            f"coverage target={row.target} releases={len(row.releases)} cases={len(row.cases)} "
            f"demonstrated={len(row.demonstrative)} families={','.join(sorted(row.families)) or '-'} {status}"
        )
    return out


def derived_json(result: GateResult) -> dict[str, Any]:
    """The generated cases: what each probes, whether it held in each run, how the candidate
    was more permissive; and the coverage table."""
    loosened = result.loosened()
    cases = []
    for one in result.derived:
        runs = {}
        for name, run in (("candidate", result.candidate), ("control", result.control)):
            found = run.derived.get(one.id) if run is not None else None
            if found is not None:
                runs[name] = {"broken": found.broken, "outcomes": found.observation.outcomes}
        cases.append(
            {
                "id": one.id,
                "target": str(one.target),
                "family": one.family,
                "releases": sorted(one.releases),
                "runs": runs,
                "loosened": loosened.get(one.id, []),
            }
        )
    table = [
        {
            "target": str(row.target),
            "releases": sorted(row.releases),
            "required": row.required,
            "covered": row.covered,
            "cases": row.cases,
            "demonstrative": row.demonstrative,
        }
        for row in result.coverage_table()
    ]
    return {"cases": cases, "coverage": table, "problems": result.derive_problems}


def _signature(record: Any) -> dict[str, Any]:
    obs = record.observation
    return {
        "passed": record.score.passed,
        "outcomes": obs.outcomes,
        "handler_calls": {k: v for k, v in sorted(obs.handler_calls.items()) if v},
        "proposals": len(obs.proposals),
        "operations": sorted(op["status"] for op in obs.operations),
        "status": obs.status,
    }


def differences(result: GateResult) -> list[dict[str, Any]]:
    """Cases whose outcome differs between candidate and control (both ran them)."""
    if result.control is None:
        return []
    theirs = {r.case.id: r for r in result.control.records}
    out = []
    for mine in result.candidate.records:
        other = theirs.get(mine.case.id)
        if other is None:
            continue
        a, b = _signature(mine), _signature(other)
        if a != b:
            changed = sorted(k for k in a if a[k] != b[k])
            out.append(
                {
                    "case_id": mine.case.id,
                    "critical": mine.case.critical,
                    "changed": changed,
                    "candidate": a,
                    "control": b,
                    "candidate_reasons": mine.score.reasons,
                    "control_reasons": other.score.reasons,
                }
            )
    return out


def _cost(run: ReleaseRun) -> str:
    m = run.metrics()
    sums = " ".join(
        f"{kind}_tokens={'unknown' if m[f'{kind}_tokens'] is None else m[f'{kind}_tokens']}"
        for kind in ("input", "output", "reasoning")
    )
    return (
        f"release={run.facts.release} tool_calls_per_task={m['tool_calls_per_task']} "
        f"model_turns_per_task={m['model_turns_per_task']} tokens_per_task={m['tokens_per_task']} "
        f"{sums} tokens={run.token_source()} seconds={run.seconds} model={run.model}"
    )


def lines(result: GateResult) -> list[str]:
    """Everything ``toolgate evals run`` prints, summary line first (redacted: `redact_text`)."""
    return [redact_text(line) for line in _lines(result)]


def _lines(result: GateResult) -> list[str]:
    out = [summary_line(result)]
    out += [f"gate_failure {reason}" for reason in result.failures()]
    for case_id, how in sorted(result.loosened().items()):
        out.append(f"loosened_case={case_id} how={json.dumps(how[:3])}")
    out += [f"derive_problem={json.dumps(problem)}" for problem in result.derive_problems]
    for record in result.candidate.records:
        if not record.score.passed:
            out.append(
                f"failed_case={record.case.id} critical={str(record.case.critical).lower()} "
                f"reasons={json.dumps(record.score.reasons[:4])}"
            )
    for diff in differences(result):
        if diff["critical"]:
            mark = "passed" if diff["candidate"]["passed"] else "FAILED"
            was = "passed" if diff["control"]["passed"] else "failed"
            out.append(
                f"critical_difference case={diff['case_id']} candidate={mark} control={was} "
                f"changed={','.join(diff['changed'])}"
            )
    out.append(_cost(result.candidate))
    if result.control is not None:
        out.append(_cost(result.control))
        if result.control.skipped:
            out.append(f"control_not_applicable={len(result.control.skipped)}")
    facts = result.candidate.facts
    out.append(
        f"candidate={facts.release} manifest_sha256={facts.manifest_sha256} manifest={facts.manifest_status} "
        f"dataset={result.dataset.name} dataset_sha256={result.dataset.sha256} model={result.candidate.model}"
    )
    return out


def _run_json(run: ReleaseRun) -> dict[str, Any]:
    return {
        "release": run.facts.release,
        "manifest_sha256": run.facts.manifest_sha256,
        "manifest_status": run.facts.manifest_status,
        "manifest_drift": list(run.facts.drift),
        "policy_version": run.facts.policy_version,
        "model": run.model,
        "metrics": run.metrics(),
        "token_source": run.token_source(),
        "seconds": run.seconds,
        "skipped": run.skipped,
        "cases": [
            {
                "id": r.case.id,
                "category": r.case.category,
                "critical": r.case.critical,
                "tenant": r.tenant,
                "input": r.case.input,
                "passed": r.score.passed,
                "reasons": r.score.reasons,
                "unsafe": r.score.unsafe,
                "observation": r.observation.to_dict(),
            }
            for r in run.records
        ],
    }


def build_report(result: GateResult) -> dict[str, Any]:
    """The JSON report, with its ``digest``."""
    body: dict[str, Any] = {
        "kind": REPORT_KIND,
        "schema_version": REPORT_SCHEMA_VERSION,
        "generated_at": iso(utcnow()),
        "model": result.candidate.model,
        "dataset": {
            "name": result.dataset.name,
            "sha256": result.dataset.sha256,
            "cases": len(result.dataset.cases),
        },
        "candidate": _run_json(result.candidate),
        "control": _run_json(result.control) if result.control is not None else None,
        "differences": differences(result),
        "derived": derived_json(result),
        "gate": {
            "passed": result.passed,
            "summary": summary_line(result),
            "failures": result.failures(),
            "critical_cases": result.critical_ids,
            "reviewed_critical": sorted(set(result.reviewed) & set(result.critical_ids)),
            "require_review": result.require_review,
        },
    }
    body = redacted_report(body)
    return {**body, "digest": digest(body)}


def report_digest(report: dict[str, Any]) -> str:
    """The digest ``report`` should carry (over everything but its ``digest`` field)."""
    return digest({k: v for k, v in report.items() if k != "digest"})


def write_reports(report: dict[str, Any], directory: Path) -> tuple[Path, Path]:
    """Write ``report`` as ``<candidate>.json`` and ``<candidate>.html`` into ``directory``."""
    from toolgate.evals.report_html import render_html

    directory.mkdir(parents=True, exist_ok=True)
    stem = str(report["candidate"]["release"]).replace("/", "-")
    json_path, html_path = directory / f"{stem}.json", directory / f"{stem}.html"
    json_path.write_text(json.dumps(report, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    html_path.write_text(render_html(report), encoding="utf-8")
    return json_path, html_path


__all__ = [
    "REPORT_KIND",
    "build_report",
    "coverage_lines",
    "derived_json",
    "differences",
    "lines",
    "report_digest",
    "summary_line",
    "write_reports",
]
