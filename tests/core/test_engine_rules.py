"""Each rule of the check engine (``tallyspan._engine._checks.RULES``) at its boundaries, with no shared data.

The cases sit on the exact edge of each threshold (one side passes, the other fails), so that a flipped
comparison or a dropped guard in the engine makes a test here fail (see CONTRIBUTING.md, mutation testing).
"""

from __future__ import annotations

import pytest

from tallyspan import Contract, ViolationType, check
from tallyspan._engine._checks import RULES
from tallyspan._engine._language import language_violations
from tallyspan._engine._refusal import is_refusal

JAPANESE = "今日は会議の資料を作成しました。"
# 20 han characters of Chinese, no kana.
CHINESE_20_HAN = "我们认为这个方案是目前最好的选择因为它他"


def _types(output: str, contract: Contract | None = None, **options: object) -> tuple[str, ...]:
    result = check(output, contract, **options)  # type: ignore[arg-type]
    assert result.check_errors == ()  # a rule that raised found nothing: the verdict would be hollow
    return result.violation_types


def test_every_rule_has_a_section_here() -> None:
    """A new rule in RULES needs its boundary tests in this file: the list below names them."""
    covered = {"length", "required", "json_schema", "forbidden", "refusal", "reasoning", "claims",
               "relevance", "repetition", "language"}  # fmt: skip
    assert {name for name, _ in RULES} == covered


# --- length ----------------------------------------------------------------------------------------


def test_min_chars_equal_to_max_chars_is_a_valid_contract_for_an_exact_length() -> None:
    contract = Contract(min_chars=5, max_chars=5)
    assert _types("あいうえお", contract) == ()
    assert _types("あいうえ", contract) == ("too_short",)
    assert _types("あいうえおか", contract) == ("too_long",)
    with pytest.raises(ValueError, match="min_chars 6 > max_chars 5"):
        Contract(min_chars=6, max_chars=5)


def test_a_min_chars_alone_or_a_max_chars_alone_is_checked() -> None:
    assert _types("あ", Contract(min_chars=2)) == ("too_short",)
    assert _types("ああ", Contract(min_chars=2)) == ()
    assert _types("ああ", Contract(max_chars=1)) == ("too_long",)
    assert _types("あ", Contract(max_chars=1)) == ()


# --- required / forbidden --------------------------------------------------------------------------


def test_required_patterns_are_looked_for_in_the_answer_not_in_its_reasoning() -> None:
    contract = Contract(required=[r"判定"], allow_reasoning=True)
    assert _types("<think>判定を考える</think>答えです。", contract) == ("missing_required",)
    assert _types("<think>考える</think>判定：合格", contract) == ()


def test_forbidden_text_inside_reasoning_is_found() -> None:
    """Forbidden patterns are searched in the whole output, before the reasoning is stripped."""
    contract = Contract(forbidden=[r"社外秘"], allow_reasoning=True)
    result = check("<think>この資料は社外秘なので</think>要約は以下の通りです。", contract)
    assert result.violation_types == ("forbidden_present",)
    assert result.violations[0].detail == "pattern '社外秘' found"
    assert _types("<think>資料を読む</think>要約は以下の通りです。", contract) == ()


def test_patterns_left_without_time_are_not_verified_and_the_budget_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A spent budget (here: none to begin with) leaves every pattern unverified, never passed."""
    import functools

    from tallyspan._contract._patterns import PatternBudget
    from tallyspan._engine import _checks

    monkeypatch.setattr(_checks, "PatternBudget", functools.partial(PatternBudget, total_s=0.0))
    result = check("判定：合格", Contract(required=[r"判定"], forbidden=[r"社外秘"]))
    assert [(violation.type, violation.detail) for violation in result.violations] == [
        (ViolationType.MISSING_REQUIRED, "pattern '判定' timed out; not verified"),
        (ViolationType.FORBIDDEN_PRESENT, "pattern '社外秘' timed out; not verified"),
    ]
    assert result.check_errors == ("pattern_budget",)


# --- json_schema -----------------------------------------------------------------------------------


def test_a_json_schema_contract_rejects_text_and_accepts_a_matching_object() -> None:
    contract = Contract(json_schema={"type": "object", "required": ["verdict"]})
    assert check("合格です", contract).violations[0].detail == "output is not JSON"
    assert _types('{"verdict": "pass"}', contract) == ()
    assert _types('{"other": 1}', contract) == ("missing_required",)


# --- refusal ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "I can't give medical advice, but I can tell you what doctors usually check first.",
        "I'm sorry, but I can't give medical advice. However, I can share what doctors usually check first.",
    ],
)
def test_a_disclaimer_followed_by_but_i_can_is_an_answer(text: str) -> None:
    assert not is_refusal(text)
    assert _types(text) == ()


@pytest.mark.parametrize(
    "text", ["I can't give medical advice.", "I'm sorry, but I can't give medical advice."]
)
def test_the_same_disclaimer_alone_is_a_refusal(text: str) -> None:
    assert is_refusal(text)
    assert _types(text) == ("refusal",)
    assert _types(text, Contract(allow_refusal=True)) == ()


# --- reasoning -------------------------------------------------------------------------------------


def test_leaked_reasoning_is_judged_unless_the_contract_allows_it() -> None:
    leaked = "<think>ユーザーは要約を求めている</think>要約です。"
    assert _types(leaked) == ("reasoning_leaked",)
    assert _types(leaked, Contract(allow_reasoning=True)) == ()


# --- claims ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("allowed", "text"),
    [
        ("導入企業３００社", "導入企業300社が採用しています。"),  # fullwidth digits in the contract
        ("TRUSTED BY 300 CUSTOMERS", "Trusted by 300 customers worldwide."),  # another case
    ],
)
def test_the_allowed_claims_are_normalised_like_the_text(allowed: str, text: str) -> None:
    assert _types(text, Contract(claims={"allowed": []})) == ("unearned_claim",)  # type: ignore[arg-type]
    assert _types(text, Contract(claims={"allowed": [allowed]})) == ()  # type: ignore[arg-type]


def test_each_unearned_claim_is_counted_in_its_detail() -> None:
    no_claims = Contract(claims={"allowed": []})  # type: ignore[arg-type]
    result = check("導入企業300社が採用しています。導入企業500社が採用しています。", no_claims)
    assert [violation.detail for violation in result.violations] == [
        "2 customer claim(s) not in claims.allowed"
    ]


# --- relevance -------------------------------------------------------------------------------------


def test_the_same_output_for_another_prompt_needs_forty_characters() -> None:
    """Short outputs ("OK", a bare verdict) are legitimately the same for different prompts."""
    long_enough = "判定は合格です。提出された報告は必要な項目を含み、数値の誤りもありませんでした。"[:40]
    earlier = [("A社の報告を審査してください。", long_enough)]
    assert _types(long_enough, prompt="B社の報告を審査してください。", other_answers=earlier) == (
        "answer_to_other_question",
    )
    short = long_enough[:39]
    assert _types(short, prompt="B社の報告を審査してください。", other_answers=[("A社", short)]) == ()


def test_an_answer_to_another_in_flight_prompt_needs_five_shared_features() -> None:
    """Four of a short prompt's six features (67 %) can be chance; five name the other question."""
    own = "東京の人口動態と経済への影響を説明してください。"
    other = "光合成と葉緑体の役割を説明してください。"
    four = "光合成は植物が行う反応で、葉緑体の中で起こります。水と二酸化炭素から糖を作ります。"
    five = "光合成は植物が行う反応で、葉緑体の中で起こります。その役割は水と二酸化炭素から糖を作ることです。"
    assert _types(four, prompt=own, other_prompts=[other]) == ()
    assert _types(five, prompt=own, other_prompts=[other]) == ("answer_to_other_question",)


# --- repetition ------------------------------------------------------------------------------------


def test_repetition_is_judged_only_above_the_contract_share() -> None:
    loop = "同じ文です。" * 20
    assert _types(loop, Contract(max_repeated_share=0.5)) == ("degenerate_repetition",)
    assert _types(loop, Contract(max_repeated_share=1.0)) == ()


# --- language --------------------------------------------------------------------------------------


def test_korean_inside_japanese_is_a_broken_mix() -> None:
    text = JAPANESE + "明日は報告書を提出する予定です。" + "한" * 21
    assert language_violations(text, "ja") == [
        (ViolationType.BROKEN_LANGUAGE_MIX, "Korean inside Japanese (21 hangul chars)")
    ]
    assert _types(text, Contract(language="ja")) == ("broken_language_mix",)
    assert _types(JAPANESE + "明日は報告書を提出する予定です。", Contract(language="ja")) == ()


@pytest.mark.parametrize(
    ("kana", "wrong"),
    [(1, False), (2, False), (3, True)],  # the tolerance is 10 % of the han: 2 kana in 20 han
)
def test_chinese_tolerates_kana_up_to_a_tenth_of_its_han(kana: int, wrong: bool) -> None:
    text = CHINESE_20_HAN + "の" * kana
    assert _types(text, Contract(language="zh")) == (("wrong_language",) if wrong else ())


@pytest.mark.parametrize(
    ("inserted", "mixed"),
    [
        ("この件は the 問題です。", False),  # one function word: a term, not English grammar
        ("この件は the and 問題です。", True),  # two function words switch the sentence
        ("この件は apple、banana 問題です。", False),  # two separated words: terms
        ("この件は apple、banana、cherry 問題です。", True),  # three words switch the sentence
        ("\nWe fixed it.\n", False),  # three words are a label, not a sentence
        ("\nWe fixed it now.\n", True),  # four words with grammar are an English sentence
    ],
)
def test_the_broken_mix_threshold(inserted: str, mixed: bool) -> None:
    expected = ("broken_language_mix",) if mixed else ()
    assert _types(JAPANESE + inserted, Contract(language="ja")) == expected


# --- the non-text checks ---------------------------------------------------------------------------


def test_waiting_exactly_max_wait_s_is_not_starvation() -> None:
    contract = Contract(max_wait_s=60)
    assert _types(JAPANESE, contract, waited_s=60.0) == ()
    assert _types(JAPANESE, contract, waited_s=60.001) == ("scheduler_starvation",)


def test_taking_exactly_deadline_s_is_not_a_timeout() -> None:
    contract = Contract(deadline_s=30)
    assert _types(JAPANESE, contract, elapsed_s=30.0) == ()
    assert _types(JAPANESE, contract, elapsed_s=30.001) == ("timeout",)


@pytest.mark.parametrize(
    ("error", "detail"),
    [
        ("APITimeoutError: Request timed out.", "the call failed with a timeout (APITimeoutError)"),
        (TimeoutError("read timed out"), "the call failed with a timeout (TimeoutError)"),
        (ConnectionRefusedError(111, "refused"), "the inference server failed (ConnectionRefusedError)"),
        ("503", "the inference server failed (503)"),
        (": timed out", "the call failed with a timeout (error)"),  # no name before the colon
        ("E" * 80 + ": timed out", f"the call failed with a timeout ({'E' * 60})"),
    ],
)
def test_an_error_detail_names_the_error_type_only(error: str | BaseException, detail: str) -> None:
    result = check(None, error=error)
    assert [violation.detail for violation in result.violations] == [detail]


def _chain(depth_of_refusal: int) -> BaseException:
    """An exception whose cause chain holds a refused connection ``depth_of_refusal`` links down."""
    error: BaseException = ConnectionRefusedError(111, "refused")
    for index in range(depth_of_refusal - 1):
        wrapper = RuntimeError(f"wrapped {index}")
        wrapper.__context__ = error  # an exception raised while handling the previous one
        error = wrapper
    return error


def test_the_error_name_is_the_text_before_the_first_colon() -> None:
    result = check(None, error="ReadTimeout: timed out: after 30 s")
    assert [violation.detail for violation in result.violations] == [
        "the call failed with a timeout (ReadTimeout)"
    ]


def test_each_cause_of_an_error_is_read_as_its_own_words() -> None:
    """A status code at the end of one cause's message is still a whole number before the next cause."""
    wrapper = RuntimeError("upstream answered 503")
    wrapper.__cause__ = KeyError("missing field")
    assert check(None, error=wrapper).violations[0].detail == "the inference server failed (RuntimeError)"


def test_the_cause_chain_is_followed_five_links_deep() -> None:
    assert _types("", error=_chain(5)) == ("process_error",)
    assert _types("", error=_chain(6)) == ()  # deeper is another failure, not the call's


@pytest.mark.parametrize(
    ("output", "detail"),
    [
        ('{"score": "x"}', "json field $.score has type string, want integer|null"),
        ('{"score": 11}', "json field $.score fails maximum 10"),
        ('{"score": 1, "extra": 1}', "json object $ has unexpected field(s)"),
        ('{"score": 1, "tags": ["a", "a"]}', "json field $.tags fails uniqueItems"),
    ],
)
def test_each_json_schema_problem_has_its_exact_detail(output: str, detail: str) -> None:
    contract = Contract(
        json_schema={
            "type": "object",
            "properties": {
                "score": {"type": ["integer", "null"], "maximum": 10},
                "tags": {"type": "array", "uniqueItems": True},
            },
            "required": ["score"],
            "unevaluatedProperties": False,
        }
    )
    assert [violation.detail for violation in check(output, contract).violations] == [detail]


@pytest.mark.parametrize(
    "inserted",
    [
        "詳細は https://example.com/this-is-the-report-for-you をご覧ください。",
        "詳細は www.example.com/this-is-the-report-for-you をご覧ください。",
        "式は $\\text{this is the rate for you}$ です。",
        "回答は <answer> <reasoning> <summary> の三部です。",  # tag names are not words
    ],
)
def test_urls_math_and_markup_are_not_english_inside_japanese(inserted: str) -> None:
    assert language_violations(JAPANESE + inserted, "ja") == []


def test_a_failing_reasoning_strip_is_counted_logged_and_the_rules_judge_the_raw_output(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import tallyspan
    from tallyspan._engine import _checks

    def broken(text: str) -> str:
        raise RuntimeError("a bug in the stripping")

    monkeypatch.setattr(_checks, "strip_reasoning", broken)
    with caplog.at_level("WARNING", logger="tallyspan._engine._checks"):
        result = check("<think>考え</think>あいう", Contract(min_chars=21, allow_reasoning=True))
    assert result.check_errors == ("strip_reasoning",)
    assert result.violations[0].detail == "20 chars < min_chars 21"  # the raw output, reasoning and all
    assert tallyspan.stats()["errors.check_rule.strip_reasoning"] == 1
    assert [record.name for record in caplog.records] == ["tallyspan._engine._checks"]
    assert caplog.records[0].getMessage().startswith("stripping reasoning from an output failed (logged once")


def test_a_refusal_detail_quotes_nothing() -> None:
    assert [violation.detail for violation in check("I can't help with that.").violations] == [
        "the output is a refusal"
    ]
