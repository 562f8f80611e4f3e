"""The check engine: every contract and language type, positive and hard negative, and the non-text classes."""

from __future__ import annotations

import dataclasses
import json

import pytest

import tallyspan
from tallyspan import CheckResult, Contract, FailureClass, Violation, ViolationType, check

REPORT = (
    "判定：合格\n"
    "今週は問い合わせ対応の流れを見直しました。受付担当が内容を確認し、緊急度に応じて三段階に分類します。"
    "緊急度が高いものは当日中に担当者へ引き継ぎ、それ以外は翌営業日までに回答します。"
)


def _types(result: CheckResult) -> tuple[str, ...]:
    return result.violation_types


# --- result shape ----------------------------------------------------------------------------------


def test_clean_output_gives_an_ok_result_without_failure_class() -> None:
    result = check(REPORT, Contract(language="ja", min_chars=20, required=[r"^判定[:：]\s*(合格|不合格)"]))
    assert result.ok is True
    assert result.violations == ()
    assert result.violation_types == ()
    assert result.failure_class is None


def test_result_is_frozen_with_sorted_unique_types_and_worst_class() -> None:
    result = check("", Contract(min_chars=10, required=["a", "b"]), waited_s=30.0)
    assert result.violation_types == ("missing_required", "too_short")  # no starvation: no max_wait_s
    assert [violation.type for violation in result.violations] == [
        ViolationType.TOO_SHORT,
        ViolationType.MISSING_REQUIRED,
        ViolationType.MISSING_REQUIRED,
    ]
    assert all(isinstance(violation, Violation) for violation in result.violations)
    assert result.failure_class == "contract_violation"
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.violations = ()  # type: ignore[misc]
    starved = check("本日の報告です。", Contract(max_wait_s=1.0, language="en"), waited_s=5.0)
    assert starved.violation_types == ("scheduler_starvation", "wrong_language")
    assert starved.failure_class == "scheduler_starvation"


def test_result_to_dict_is_json_ready() -> None:
    result = check("短い", Contract(min_chars=10))
    assert json.loads(json.dumps(result.to_dict())) == {
        "ok": False,
        "violation_types": ["too_short"],
        "failure_class": "contract_violation",
        "violations": [
            {"type": "too_short", "failure_class": "contract_violation", "detail": "2 chars < min_chars 10"}
        ],
        "check_errors": [],
    }


# --- too_short / too_long --------------------------------------------------------------------------


def test_length_counts_characters_without_whitespace_or_reasoning() -> None:
    contract = Contract(min_chars=10, max_chars=12, allow_reasoning=True)
    assert _types(check("あいうえお かきくけこ", contract)) == ()  # 10 chars, the space excluded
    assert check("あいうえお", contract).violations[0].detail == "5 chars < min_chars 10"
    assert _types(check("<think>" + "考" * 500 + "</think>あいうえおかきくけこ", contract)) == ()
    assert check("あ" * 13, contract).violations[0].detail == "13 chars > max_chars 12"


def test_japanese_is_counted_in_characters_not_words() -> None:
    assert _types(check("本日の会議では予算配分について議論しました", Contract(min_chars=20))) == ()


# --- missing_required / forbidden_present -----------------------------------------------------------


def test_required_patterns_match_at_line_starts_and_report_their_name() -> None:
    contract = Contract(required=[r"^判定[:：]\s*(合格|不合格)", {"name": "reason", "pattern": "理由"}])  # type: ignore[list-item]
    result = check("本文です。\n判定：不合格", contract)
    assert [violation.detail for violation in result.violations] == ["pattern 'reason' not found"]
    assert _types(check("判定：合格\n理由：問題なし", contract)) == ()


def test_forbidden_patterns_are_found_anywhere_including_reasoning() -> None:
    contract = Contract(
        forbidden=[{"name": "template token", "pattern": r"<\|im_end\|>"}],  # type: ignore[list-item]
        allow_reasoning=True,
    )
    result = check("回答です。<|im_end|>", contract)
    assert result.violation_types == ("forbidden_present",)
    assert result.violations[0].detail == "pattern 'template token' found"
    assert _types(check("回答です。im_end", contract)) == ()


def test_json_schema_reports_missing_and_mistyped_fields() -> None:
    schema = {
        "type": "object",
        "required": ["verdict", "score"],
        "properties": {"verdict": {"enum": ["APPROVE", "REJECT"]}, "score": {"type": "number"}},
    }
    contract = Contract(json_schema=schema)
    assert _types(check('```json\n{"verdict": "APPROVE", "score": 0.9}\n```', contract)) == ()
    details = [
        violation.detail for violation in check('{"verdict": "MAYBE", "score": "high"}', contract).violations
    ]
    assert details == [
        "json field $.verdict is not one of the allowed values",
        "json field $.score has type string, want number",
    ]
    missing = check('{"verdict": "APPROVE"}', contract)
    assert [violation.detail for violation in missing.violations] == ["json field $.score missing"]
    assert check("判定：合格", contract).violations[0].detail == "output is not JSON"


def test_a_hostile_regex_times_out_instead_of_hanging_and_is_counted() -> None:
    # One hostile pattern a check: two would share one span's budget, which a loaded machine can spend.
    required = Contract(required=[r"^(a+)+$"], max_repeated_share=None)
    forbidden = Contract(forbidden=[{"name": "evil", "pattern": r"(x+x+)+y"}], max_repeated_share=None)  # type: ignore[list-item]
    details = [
        violation.detail
        for contract, text in ((required, "a" * 5000 + "!"), (forbidden, "x" * 5000))
        for violation in check(text, contract).violations
    ]
    assert details == ["pattern '^(a+)+$' timed out; not verified", "pattern 'evil' timed out; not verified"]
    assert tallyspan.stats()["checks.regex_timeout"] == 2


# --- refusal -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "I'm sorry, but I can't help with that request.",
        "As an AI language model, I cannot browse the internet.",
        "申し訳ありませんが、そのご依頼にはお応えできかねます。",
        "申し訳ございませんが、その質問にはお答えできません。",
        "私はAIとして、個人的な意見を持っていません。",
        "抱歉，我无法回答这个问题。",
        "作为一个人工智能语言模型，我不能提供医疗建议。",
    ],
)
def test_refusals_in_english_japanese_and_chinese_are_caught(text: str) -> None:
    assert _types(check(text)) == ("refusal",)


@pytest.mark.parametrize(
    "text",
    [
        "申し訳ありませんが、最新の株価にはアクセスできません。ただし、一般的な分析方法をご紹介します。"
        + "分析の手順は次の通りです。" * 30,
        "お問い合わせありがとうございます。ご依頼の資料を添付いたします。",
        "The contract says the supplier cannot refuse a valid order.",
        "ユーザーが「できません」と言った場合の対応を説明します。",
    ],
)
def test_answers_that_mention_refusing_are_not_refusals(text: str) -> None:
    assert "refusal" not in _types(check(text))


def test_allow_refusal_turns_the_refusal_check_off() -> None:
    assert _types(check("I'm sorry, but I can't help with that.", Contract(allow_refusal=True))) == ()


# --- reasoning_leaked --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        ("<think>ユーザーは報告を求めている</think>判定：合格", "think block in the output"),
        ("考え中…</think>判定：合格", "closing think tag in the output"),
        ("<|channel|>analysis<|message|>We need to answer<|end|>", "harmony channel token in the output"),
        ("Okay, so I need to write a report about sales.", "output opens with reasoning"),
        ("The user is asking for a weekly report. Here it is.", "output opens with reasoning"),
        ("ユーザーは週次報告を求めています。まず売上を確認します。", "output opens with reasoning"),
    ],
)
def test_leaked_reasoning_is_caught(text: str, detail: str) -> None:
    result = check(text)
    assert "reasoning_leaked" in result.violation_types
    assert next(v.detail for v in result.violations if v.type is ViolationType.REASONING_LEAKED) == detail


def test_reasoning_repeated_from_the_providers_field_is_a_leak() -> None:
    reasoning = "売上の前年比を確認し、主要な要因を三つに整理してから結論を書くことにする。"
    assert _types(check("回答：" + reasoning + "以上です。", reasoning_text=reasoning)) == (
        "reasoning_leaked",
    )
    assert _types(check("売上は前年比で増えました。", reasoning_text=reasoning)) == ()


@pytest.mark.parametrize(
    "text",
    [
        "Let's meet on Friday to review the report.",
        "思考のプロセスについて説明します。",
        "HTMLの<thead>タグを使います。",
        "We need more budget next quarter.",
    ],
)
def test_ordinary_text_is_not_leaked_reasoning(text: str) -> None:
    assert "reasoning_leaked" not in _types(check(text))


# --- unearned_claim ----------------------------------------------------------------------------


def test_unearned_claims_are_caught_by_kind() -> None:
    contract = Contract(claims={"allowed": []})  # type: ignore[arg-type]
    result = check("導入企業300社が採用しています。業界初のサービスです。満足度は98%です。", contract)
    assert result.violation_types == ("unearned_claim",)
    assert sorted(violation.detail for violation in result.violations) == [
        "1 customer claim(s) not in claims.allowed",
        "1 percentage claim(s) not in claims.allowed",
        "1 superlative claim(s) not in claims.allowed",
    ]
    english = check("Trusted by 500 customers, we are the industry-leading vendor.", contract)
    assert english.violation_types == ("unearned_claim",)


@pytest.mark.parametrize(
    "text",
    [
        "今週は目標の 46% まで進みました。",
        "GPU 使用率は 97% でした。",
        "The test suite passed at 95%.",
    ],
)
def test_a_progress_or_utilisation_percentage_is_not_a_claim(text: str) -> None:
    assert _types(check(text, Contract(claims={"allowed": []}))) == ()  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "text",
    [
        "処理速度が 40% 向上しました。",
        "国内シェアは 35% です。",
        "Our customers save 30% on average.",
        "It is 2x faster and 50% cheaper than the alternative.",
        "用户满意度达到 99%。",
    ],
)
def test_a_percentage_that_claims_something_is_a_claim(text: str) -> None:
    assert _types(check(text, Contract(claims={"allowed": []}))) == ("unearned_claim",)  # type: ignore[arg-type]


def test_claims_in_the_allow_list_are_earned() -> None:
    contract = Contract(claims={"allowed": ["満足度は98%", "導入企業300社"]})  # type: ignore[arg-type]
    assert _types(check("導入企業３００社が採用しています。満足度は98%です。", contract)) == ()


def test_claims_are_only_checked_when_the_contract_has_a_claims_section() -> None:
    assert _types(check("売上は前年比120%となりました。", Contract())) == ()


# --- answer_to_other_question --------------------------------------------------------------------


def test_an_answer_to_another_in_flight_prompt_is_caught() -> None:
    prompt = "東京の人口動態と経済への影響を説明してください。"
    other = "光合成の二つの段階と葉緑体の役割を説明してください。"
    answer = "光合成は明反応と暗反応の二つの段階からなります。葉緑体のチラコイド膜で明反応が起こります。"
    result = check(answer, prompt=prompt, other_prompts=[other])
    assert result.violation_types == ("answer_to_other_question",)
    assert "prompt #0" in result.violations[0].detail
    assert _types(check(answer, prompt=other, other_prompts=[prompt])) == ()


def test_another_prompt_in_flight_twice_is_one_question_not_its_own_runner_up() -> None:
    prompt = "東京の人口動態と経済への影響を説明してください。"
    other = "光合成の二つの段階と葉緑体の役割を説明してください。"
    answer = "光合成は明反応と暗反応の二つの段階からなります。葉緑体のチラコイド膜で明反応が起こります。"
    result = check(answer, prompt=prompt, other_prompts=[prompt, other, f" {other}\n", prompt])
    assert result.violation_types == ("answer_to_other_question",)
    assert "prompt #1" in result.violations[0].detail  # the first time it was seen


def test_the_same_output_for_a_different_prompt_is_caught() -> None:
    answer = "判定：合格。提出された週次報告は必要な項目をすべて含み、数値にも誤りはありませんでした。"
    earlier = [("A社の週次報告を審査してください。", answer)]
    assert _types(check(answer, prompt="B社の週次報告を審査してください。", other_answers=earlier)) == (
        "answer_to_other_question",
    )
    assert _types(check(answer, prompt="A社の週次報告を審査してください。", other_answers=earlier)) == ()
    assert _types(check("判定：合格", prompt="B社", other_answers=[("A社", "判定：合格")])) == ()


# --- language (details in test_language.py) ------------------------------------------------------


def test_language_contract_drives_the_language_checks() -> None:
    assert _types(check("Here is your report.", Contract(language="ja"))) == ("not_japanese",)
    assert _types(check("報告です。我们认为这个方案是目前最好的选择。", Contract(language="ja"))) == (
        "chinese_in_japanese",
    )
    assert _types(
        check("この機能は very useful ですが、some users は confused しています。", Contract(language="ja"))
    ) == ("broken_language_mix",)
    assert _types(check("本日の報告です。", Contract(language="en"))) == ("wrong_language",)
    assert check("Here is your report.", Contract(language="ja")).failure_class == "language_corruption"


# --- the non-text classes --------------------------------------------------------------------------


def test_a_call_over_its_deadline_is_a_timeout() -> None:
    result = check(REPORT, Contract(deadline_s=30), elapsed_s=45.2)
    assert result.violation_types == ("timeout",)
    assert result.violations[0].detail == "took 45.2 s > deadline_s 30"
    assert check(REPORT, Contract(deadline_s=30), elapsed_s=29.9).ok


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (TimeoutError("read timed out"), "timeout"),
        ("APITimeoutError", "timeout"),
        ("httpx.ReadTimeout: timed out", "timeout"),
        (ConnectionRefusedError(111, "Connection refused"), "process_error"),
        ("APIConnectionError: Connection error.", "process_error"),
        ("ConnectionResetError: [Errno 104] Connection reset by peer", "process_error"),
        ("503", "process_error"),
        ("InternalServerError: Error code: 500", "process_error"),
        # A gateway or the server giving up on time is a timeout, though 504 is a 5xx and 408 a 4xx.
        ("APIStatusError: Error code: 504", "timeout"),
        ("InternalServerError: 504 Gateway Timeout", "timeout"),
        ("APIStatusError: Error code: 408", "timeout"),
        ("HTTPStatusError: 408", "timeout"),
    ],
)
def test_errors_are_classified_as_timeout_or_process_error(error: str | BaseException, expected: str) -> None:
    result = check("", Contract(min_chars=100), error=error)
    assert result.violation_types == (expected,)
    assert result.failure_class == expected


def test_an_error_caused_by_a_refused_connection_is_a_process_error() -> None:
    error = RuntimeError("request failed")
    error.__cause__ = ConnectionRefusedError(111, "Connection refused")
    assert check(None, error=error).violation_types == ("process_error",)


def test_other_errors_give_no_violation_and_skip_the_output_checks() -> None:
    assert check("", Contract(min_chars=100), error="BadRequestError: Error code: 400").ok


def test_waiting_longer_than_max_wait_is_scheduler_starvation() -> None:
    result = check(REPORT, Contract(max_wait_s=60), waited_s=600.0)
    assert result.violation_types == ("scheduler_starvation",)
    assert result.violations[0].detail == "waited 600 s > max_wait_s 60"
    assert result.violations[0].failure_class is FailureClass.SCHEDULER_STARVATION
    assert check(REPORT, Contract(max_wait_s=60), waited_s=10.0).ok


def test_unknown_output_runs_only_the_non_text_checks() -> None:
    contract = Contract(min_chars=100, language="ja", deadline_s=1)
    assert check(None, contract).ok
    assert check(None, contract, elapsed_s=2.0).violation_types == ("timeout",)


def test_no_contract_applies_the_default_rules() -> None:
    assert check("I'm sorry, but I can't help with that.").violation_types == ("refusal",)
    assert check("短い").ok


def test_details_never_quote_the_output() -> None:
    secret = "極秘プロジェクト青空の売上は前年比300%"
    contract = Contract(
        language="en",
        min_chars=500,
        required=["verdict"],
        forbidden=["青空"],
        claims={"allowed": []},  # type: ignore[arg-type]
    )
    result = check(secret, contract)
    assert len(result.violations) >= 5
    for violation in result.violations:
        assert "極秘" not in violation.detail
        assert "300%" not in violation.detail


# --- json_schema: the whole draft, content-free ------------------------------------------------------


def test_json_schema_applies_the_keywords_a_subset_would_ignore() -> None:
    schema = {
        "$defs": {"verdict": {"enum": ["APPROVE", "REJECT"]}},
        "type": "object",
        "required": ["verdict", "id", "kind"],
        "properties": {
            "verdict": {"$ref": "#/$defs/verdict"},
            "id": {"type": "string", "pattern": "^T-[0-9]{4}$"},
            "kind": {"const": "review"},
            "score": {"oneOf": [{"type": "integer"}, {"type": "null"}]},
        },
        "additionalProperties": False,
    }
    contract = Contract(json_schema=schema)
    assert check('{"verdict": "APPROVE", "id": "T-0042", "kind": "review", "score": 3}', contract).ok
    secret = '{"verdict": "MAYBE", "id": "secret-id", "kind": "other", "score": 0.5, "leak": "pw123"}'
    details = sorted(violation.detail for violation in check(secret, contract).violations)
    assert details == [
        "json field $.id fails pattern",
        "json field $.kind is not one of the allowed values",
        "json field $.score fails oneOf",
        "json field $.verdict is not one of the allowed values",
        "json object $ has unexpected field(s)",
    ]
    for detail in details:
        assert "secret" not in detail
        assert "MAYBE" not in detail
        assert "leak" not in detail


def test_json_schema_paths_name_only_fields_the_schema_declares() -> None:
    contract = Contract(json_schema={"type": "object", "additionalProperties": {"type": "integer"}})
    result = check('{"customer-name-tanaka": "x"}', contract)
    assert [violation.detail for violation in result.violations] == [
        "json field $.* has type string, want integer"
    ]


def test_an_invalid_schema_fails_when_the_contract_is_loaded() -> None:
    with pytest.raises(tallyspan.ContractError, match="invalid JSON Schema"):
        tallyspan.load_contracts({"report": {"json_schema": {"type": "no-such-type"}}})


def test_deep_nesting_is_refused_without_recursion_and_the_other_rules_still_run() -> None:
    contract = Contract(json_schema={"type": "array"}, forbidden=[r"<\|im_end\|>"], min_chars=10)
    result = check("[" * 100_000 + "<|im_end|>", contract)
    assert result.violation_types == ("degenerate_repetition", "forbidden_present")  # it loops, too
    assert result.check_errors == ("json_schema",)
    assert tallyspan.stats()["errors.check_rule.json_schema"] == 1
    assert result.to_dict()["check_errors"] == ["json_schema"]


# --- rule isolation ----------------------------------------------------------------------------------


def test_a_rule_that_raises_is_recorded_counted_and_the_others_still_run(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from tallyspan._engine import _checks

    def broken(given: object) -> list[Violation]:
        raise RuntimeError("a bug in one rule")

    rules = tuple((name, broken if name in ("language", "refusal") else rule) for name, rule in _checks.RULES)
    monkeypatch.setattr(_checks, "RULES", rules)
    result = check(
        "Sorry, I can't. <|im_end|>", Contract(language="ja", min_chars=100, forbidden=[r"<\|im_end\|>"])
    )
    assert result.violation_types == ("forbidden_present", "too_short")
    assert result.check_errors == ("language", "refusal")
    stats = tallyspan.stats()
    assert (stats["errors.check_rule.language"], stats["errors.check_rule.refusal"]) == (1, 1)
    warnings = [
        record.getMessage() for record in caplog.records if record.name == "tallyspan._engine._checks"
    ]
    assert [message.split(" (logged once")[0] for message in warnings] == [
        "the check rule 'refusal' failed",
        "the check rule 'language' failed",
    ]


def test_every_rule_has_a_stable_name() -> None:
    from tallyspan._engine import _checks

    assert [name for name, _ in _checks.RULES] == [
        "length", "required", "json_schema", "forbidden", "refusal", "reasoning", "claims", "relevance",
        "repetition", "language",
    ]  # fmt: skip


# --- refusal, as the labels define it ------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "申し訳ありませんが、そのような状況を説明する情報が提供されていません。",
        "私が人間として存在している限り、そのような状況はあり得ません。",
        "申し訳ありませんが、私は田中さんの個人情報を知りません。",
        "私は木としての意識を持たないため、感情を持ちません。しかし、森林は大切にするべきです。",
        "ご質問ありがとうございます。しかし、その質問にはお答えできません。",
        "I cannot provide information that could be used to identify a person. Please ask something else.",
        "Hello! I'm sorry, I don't know anything about that particular location.",
        "抱歉，我无法回答这个问题，因为我没有相关的信息。",
    ],
)
def test_refusals_without_apology_words_or_in_another_language_are_caught(text: str) -> None:
    assert "refusal" in check(text).violation_types


def test_an_english_refusal_under_a_japanese_contract_is_a_refusal_and_not_japanese() -> None:
    text = (
        "I cannot provide information about real people's private lives. Their addresses, health and family "
        "matters are theirs to share. If you want to reach someone, please use a public channel instead."
    )
    assert check(text, Contract(language="ja")).violation_types == ("not_japanese", "refusal")


@pytest.mark.parametrize(
    "text",
    [
        # a disclaimer, then the real answer (hypothetically, or "but I can")
        "私は人工知能であり、実際には森の木ではありませんので、直接的な答えはありません。ただし、仮定して、"
        "私が100歳の木である場合、伐採者が私を切り始めると、恐ろしい気分になるでしょう。",
        "申し訳ありませんが、最新の株価にはアクセスできません。ただし、一般的な分析方法をご紹介できます。",
        # the answer first; an apology the model appended after its turn ended takes nothing back
        "AさんはCさんの祖父です。<|im_end|>\n<|endoftext|>I'm sorry, but I don't have enough context.",
        "AさんはCさんの祖父です。I'm sorry, but I don't know why you ask.",
        "そのような状況はあり得ません。なぜなら、二人は同時に一位になれないからです。つまり、答えは二位です。"
        "追い越した人は三位になります。",
    ],
)
def test_a_disclaimer_followed_by_the_answer_is_not_a_refusal(text: str) -> None:
    assert "refusal" not in check(text).violation_types


def test_harmony_analysis_is_not_judged_as_the_answer() -> None:
    text = (
        "<|channel|>analysis<|message|>We need to answer in Japanese. The user asks about Tokyo.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>東京は日本の首都で、人口は約1400万人です。<|return|>"
    )
    result = check(text, Contract(language="ja", allow_reasoning=True))
    assert result.ok
    assert "reasoning_leaked" in check(text, Contract(language="ja")).violation_types


@pytest.mark.parametrize(
    ("text", "length"),
    [
        ("I am fine.", 10),  # a gap between Latin words is a character
        ("2, 3, 5, 4, 1", 13),
        ("はい。 そうです。", 8),  # whitespace beside Japanese is layout
        ("価格は 100 円", 7),
        ("a \n\t b", 3),  # a run of whitespace is one gap
    ],
)
def test_length_counts_a_gap_between_latin_words_once_and_no_other_whitespace(text: str, length: int) -> None:
    assert check(text, Contract(min_chars=length)).violation_types == ()
    assert check(text, Contract(min_chars=length + 1)).violations[0].detail == (
        f"{length} chars < min_chars {length + 1}"
    )
    assert check(text, Contract(max_chars=length)).violation_types == ()
    assert check(text, Contract(max_chars=length - 1)).violations[0].detail == (
        f"{length} chars > max_chars {length - 1}"
    )
