"""A check that cannot finish is said on the span (``tallyspan.check_errors``); the other checks still run.

Real OpenAI client, local server, the whole chain.
"""

from __future__ import annotations

from typing import Any

import openai
from tests.conftest import MakeInstrumented

import tallyspan
from tallyspan import semconv
from tallyspan.testing import OpenAICompatibleServer, ScriptedReply

USER: Any = [{"role": "user", "content": "今週の報告を書いてください。"}]


def _checked(make_instrumented: MakeInstrumented, contracts: Any, answer: str) -> dict[str, Any]:
    made = make_instrumented(contracts, store=None, instrumentors=["tallyspan_openai"])
    with (
        OpenAICompatibleServer(replies=[ScriptedReply(text=answer)]) as server,
        openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0) as client,
        tallyspan.stage("report"),
    ):
        client.chat.completions.create(model="gpt-4o", messages=USER)
    assert made.instrumentation.force_flush()
    [span] = [span for span in made.spans.get_finished_spans() if span.name.startswith("chat ")]
    return dict(span.attributes or {})


def test_patterns_out_of_time_are_recorded_and_the_token_is_still_found(
    make_instrumented: MakeInstrumented,
) -> None:
    slow: list[Any] = [{"name": f"slow{i}", "pattern": rf"(x+x+)+y{i}"} for i in range(40)]
    contracts = {
        "contracts": {
            "report": {"forbidden": [{"name": "template token", "pattern": r"<\|im_end\|>"}, *slow]}
        }
    }
    attributes = _checked(make_instrumented, contracts, "<|im_end|>" + "x" * 5_000)
    assert tuple(attributes[semconv.CHECK_ERRORS]) == ("pattern_budget",)
    assert "forbidden_present" in tuple(attributes[semconv.VIOLATION_TYPES])
    assert tallyspan.stats()["errors.check_budget"] == 1


def test_a_span_whose_checks_all_ran_has_no_check_errors(make_instrumented: MakeInstrumented) -> None:
    attributes = _checked(make_instrumented, {"contracts": {"report": {"min_chars": 1}}}, "fine")
    assert semconv.CHECK_ERRORS not in attributes
    assert attributes[semconv.CONTRACT] == "report"


def test_an_answer_of_deep_json_cannot_switch_its_own_checks_off(make_instrumented: MakeInstrumented) -> None:
    """100,000 nested ``[`` under ``json_schema``: the schema rule says it could not run, the rest still judge."""
    contracts = {
        "contracts": {
            "report": {
                "json_schema": {"type": "object"},
                "forbidden": [r"<\|im_end\|>"],
                "max_repeated_share": None,
            }
        }
    }
    attributes = _checked(make_instrumented, contracts, "[" * 100_000 + "<|im_end|>")
    assert tuple(attributes[semconv.CHECK_ERRORS]) == ("json_schema",)
    assert tuple(attributes[semconv.VIOLATION_TYPES]) == ("forbidden_present",)
    assert attributes[semconv.CONTRACT] == "report"
    assert tallyspan.stats()["errors.check_rule.json_schema"] == 1
