"""Each verdict in words: the rule broken and the corrective action, from the type, the detail, the contract."""

from __future__ import annotations

import pytest

from tallyspan import Contract, ViolationType
from tallyspan._datasets._terms import explain


@pytest.mark.parametrize("kind", [member.value for member in ViolationType])
def test_every_type_has_its_own_rule(kind: str) -> None:
    rule = explain(kind, "")
    assert rule.term
    assert rule.hint
    assert not rule.hint.startswith("fix the ")  # the generic rule is for types this version does not know


@pytest.mark.parametrize(
    ("kind", "detail", "term", "hint"),
    [
        ("too_short", "12 chars < min_chars 200", "at least 200 characters (min_chars 200)",
         "the deliverable must have at least 200 characters (it had 12)"),
        ("too_long", "9000 chars > max_chars 8000", "at most 8000 characters (max_chars 8000)",
         "the deliverable must have at most 8000 characters (it had 9000)"),
        ("missing_required", "pattern '^判定[:：]' not found", "required: a line matching 判定[:：]",
         "the deliverable must contain a line matching 判定[:：]"),
        ("forbidden_present", "pattern '<\\|im_end\\|>' found", "forbidden: text matching <\\|im_end\\|>",
         "the deliverable must not contain text matching <\\|im_end\\|>"),
        ("wrong_language", "primary language ja, not en (3 kana, 0 han, 0 latin words)",
         "written in English (language: en)", "write the deliverable in English"),
        ("timeout", "took 130 s > deadline_s 120", "finish within 120 s (deadline_s 120)",
         "the call must finish within 120 s (it took 130 s): shorten the work or raise deadline_s"),
        ("scheduler_starvation", "waited 900 s > max_wait_s 600", "start within 600 s of being queued (max_wait_s 600)",
         "the work waited 900 s in the queue: add capacity or lower concurrency so it starts within 600 s"),
        ("process_error", "the inference server failed (InternalServerError)", "the inference server answers",
         "the inference server failed (InternalServerError): check that it is up and has capacity, then retry"),
    ],
)  # fmt: skip
def test_rules_are_read_from_the_details(kind: str, detail: str, term: str, hint: str) -> None:
    rule = explain(kind, detail)
    assert (rule.term, rule.hint) == (term, hint)


def test_a_named_pattern_is_shown_with_its_regex_when_the_contract_is_known() -> None:
    contract = Contract.model_validate(
        {"required": [{"name": "verdict", "pattern": "(?m)^判定[:：]\\s*(合格|不合格)"}]}
    )
    assert explain("missing_required", "pattern 'verdict' not found").hint == (
        "the deliverable must contain the pattern named verdict"
    )
    assert explain("missing_required", "pattern 'verdict' not found", contract).hint == (
        "the deliverable must contain verdict: a line matching 判定[:：]\\s*(合格|不合格)"
    )


def test_an_unknown_type_gets_a_generic_rule() -> None:
    rule = explain("brand_new_type", "some detail")
    assert rule.term == "brand new type"
    assert rule.hint == "fix the brand new type (some detail)"
