"""The packaged evaluation dataset: generated, complete, valid, and loaded with clear errors."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from toolgate.errors import REJECTION_CODES
from toolgate.evals.dataset.build import build_cases, main, render
from toolgate.evals.dataset.helpers import KNOWN_TOOLS
from toolgate.evals.fixtures import CATEGORIES, DEFAULT_DATASET, DatasetError, load_dataset


def test_the_committed_file_is_exactly_what_the_generator_writes() -> None:
    assert DEFAULT_DATASET.read_text(encoding="utf-8") == render()
    assert main(["--check"]) == 0


def test_at_least_180_valid_cases_with_unique_ids_over_every_category() -> None:
    dataset = load_dataset(DEFAULT_DATASET)
    assert len(dataset.cases) >= 180
    assert len({c.id for c in dataset.cases}) == len(dataset.cases)
    per_category = Counter(c.category for c in dataset.cases)
    assert set(per_category) == set(CATEGORIES)
    assert min(per_category.values()) >= 14, per_category
    assert [c.model_dump() for c in dataset.cases] == [c.model_dump() for c in build_cases()]


def test_cases_use_real_codes_and_name_their_required_tools() -> None:
    dataset = load_dataset(DEFAULT_DATASET)
    codes = {code for c in dataset.cases for code in c.expected.calls.values()} - {
        "accepted",
        "failed",
        "proposal",
        "not_run",
    }
    assert codes <= set(REJECTION_CODES)
    assert {"cross_tenant", "not_owner", "unauthorized", "loop_detected", "budget_exhausted"} <= codes
    for case in dataset.cases:
        named = {call.name for turn in case.turns for call in turn}
        assert case.requires == sorted(named & KNOWN_TOOLS), case.id
    critical = [c for c in dataset.cases if c.critical]
    assert len(critical) >= 60
    assert all(c.category != "no_tool" for c in critical)


def _write(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "cases.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _good() -> dict[str, object]:
    return json.loads(DEFAULT_DATASET.read_text(encoding="utf-8").splitlines()[0])


@pytest.mark.parametrize(
    ("second_line", "message"),
    [
        ("{not json", "line 2: not valid JSON"),
        ("[1, 2]", "line 2: a case must be a JSON object"),
        (
            json.dumps({**_good(), "id": "other-case", "schema_version": 2}),
            "line 2: unsupported schema_version 2",
        ),
        (json.dumps(_good()), "line 2: duplicate case id 'sel-ada-order-status' (first on line 1)"),
        (
            json.dumps({**_good(), "id": "bad-code", "expected": {"refusal": "forbidden"}}),
            "line 2: expected.refusal: Value error, unknown rejection code 'forbidden'",
        ),
        (
            json.dumps({**_good(), "id": "bad-ref", "expected": {"calls": {"c9": "accepted"}}}),
            "line 2: case: Value error, expected.calls names calls the turns do not make: ['c9']",
        ),
        (
            json.dumps({**_good(), "id": "bad-category", "category": "vibes"}),
            "line 2: category: Input should be",
        ),
    ],
)
def test_a_broken_line_is_refused_with_its_line_number(
    tmp_path: Path, second_line: str, message: str
) -> None:
    path = _write(tmp_path, [json.dumps(_good()), second_line])
    with pytest.raises(DatasetError) as refused:
        load_dataset(path)
    assert str(refused.value).startswith(message)


def test_an_empty_or_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="holds no cases"):
        load_dataset(_write(tmp_path, [""]))
    with pytest.raises(DatasetError, match="cannot read dataset"):
        load_dataset(tmp_path / "missing.jsonl")


def test_the_digest_binds_the_bytes(tmp_path: Path) -> None:
    original = load_dataset(DEFAULT_DATASET)
    copy = tmp_path / "copy.jsonl"
    copy.write_bytes(DEFAULT_DATASET.read_bytes())
    assert load_dataset(copy).sha256 == original.sha256
    copy.write_text(
        DEFAULT_DATASET.read_text(encoding="utf-8").replace("Where is my order", "Where's my order", 1),
        encoding="utf-8",
    )
    assert load_dataset(copy).sha256 != original.sha256
