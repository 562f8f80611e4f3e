"""The phrase rules one by one: the first turn, refusals at their limits, reasoning, claims."""

from __future__ import annotations

import re

import pytest

from tallyspan import Contract, check
from tallyspan._engine._refusal import (
    find_claims,
    find_reasoning_leak,
    first_turn,
    is_refusal,
    strip_reasoning,
)

REFUSAL = "I can't help with that."

# --- the first turn ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "turn"),
    [
        ("答え", "答え"),
        ("a<b [c]", "a<b [c]"),
        ("答え<|im_end|>次の質問", "答え"),
        ("答え</s>次", "答え"),
        ("答え<|eot_id|>次<|eot_id|>", "答え"),
        ("<|im_end|>答え<|im_end|>次", "<|im_end|>答え"),  # an end token before any content ends nothing
        ("  \n<|im_start|>答え<|endoftext|>x", "  \n<|im_start|>答え"),
        ("[INST]質問[/INST]答え", "[INST]質問"),
    ],
)
def test_the_first_turn_ends_at_the_first_end_token_after_content(text: str, turn: str) -> None:
    assert first_turn(text) == turn


# --- refusals at their limits ------------------------------------------------------------------------

# One opening per alternative of the refusal pattern, in its order.
_ONE_PER_ALTERNATIVE = (
    "I'm sorry, but I cannot do this.",
    "I won't help with that.",
    "As an AI language model, I do not have opinions.",
    "I must decline.",
    "I am sorry, I don't know.",
    "I do not have enough information.",
    "I'm not able to help with that.",
    "I won't be able to help.",
    "That's not something I can help with.",
    "I'm not comfortable answering this.",
    "申し訳ないが、わかりません。",
    "お答えできません。",
    "判断できません。",
    "お答えしかねます。",
    "私には答えられません。",
    "回答を差し控えさせていただきます。",
    "この件には回答しません。",
    "それに答えることは適切ではありません。",
    "AIですので、感情は持っていません。",
    "お断りいたします。",
    "私は感情を持ちません。",
    "抱歉，我不能回答。",
    "作为AI，我不能这样做。",
    "我无法提供。",
)


def _top_level_alternatives(pattern: str) -> list[str]:
    alternatives, depth, in_class, escaped, start = [], 0, False, False, 0
    for index, char in enumerate(pattern):
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "|" and depth == 0:
            alternatives.append(pattern[start:index])
            start = index + 1
    return [*alternatives, pattern[start:]]


def test_every_refusal_alternative_holds_an_anchor_word_the_cheap_scan_finds() -> None:
    # is_refusal runs the refusal pattern only where an anchor word occurs: each alternative needs one.
    from tallyspan._engine import _refusal

    source = _refusal._REFUSAL.pattern.removeprefix("(?i)")
    alternatives = _top_level_alternatives(source)
    assert len(alternatives) == len(_ONE_PER_ALTERNATIVE), "add an opening for the new alternative"
    for alternative, opening in zip(alternatives, _ONE_PER_ALTERNATIVE, strict=True):
        found = re.compile(alternative, re.IGNORECASE).search(opening)
        assert found is not None, (alternative, opening)
        assert _refusal._REFUSAL_ANCHORS.search(found.group().lower()), opening
        assert is_refusal(opening), opening
    assert is_refusal("I'M SORRY, BUT I CANNOT DO THIS.")
    assert is_refusal("I Will Not Help With That.")


@pytest.mark.parametrize(
    ("text", "refusal"),
    [
        (REFUSAL, True),
        ("", False),
        ("<|im_start|>" + REFUSAL, True),  # template debris before it
        ("<|im_start|>" * 6 + REFUSAL, True),  # more debris than a lead may hold: it is removed
        ("[INST]" * 11 + REFUSAL, True),
        ("[INST] [/INST]", False),  # only debris
        # at most 400 characters, a Latin letter counting a third: 7 + 393 is the longest refusal
        (REFUSAL + "あ" * 393, True),
        (REFUSAL + "あ" * 394, False),
        # at most 60 characters before it in its sentence
        ("Well, " + "x" * 53 + " " + REFUSAL, True),
        ("Well, " + "x" * 54 + " " + REFUSAL, False),
        ("Here is the answer. " + REFUSAL, False),  # an answer came first
        ("Hello! " + REFUSAL, True),  # a greeting does not
        ("Thank you for your question. " + REFUSAL, True),  # nor thanks
        ("Thank you for reaching out to us today. " + REFUSAL, True),
        # a courtesy sentence has at most 40 characters after its word; a longer one is an answer
        ("Thank" + "x" * 40 + ". " + REFUSAL, True),
        ("Thank" + "x" * 41 + ". " + REFUSAL, False),
        (" " * 61 + REFUSAL, True),  # leading whitespace is no lead
        ("Well \n" + REFUSAL, True),  # nor is whitespace at the end of the lead
        ("ええ\nそのような状況はあり得ません。", True),
        ("ありがとうございます。申し訳ありませんが、お答えできません。", True),
        # a disclaimer followed by the answer, within 240 characters of the refusal
        (REFUSAL + " " + "あ" * 218 + " but I can help.", False),
        (REFUSAL + " " + "あ" * 219 + " but I can help.", True),
        # a premise rejected, with at most 30 characters after it
        ("そのような状況はあり得ません。", True),
        ("そのような状況はあり得ません。" + "あ" * 30, True),
        ("そのような状況はあり得ません。" + "あ" * 31, False),
        ("答えます。そのような状況はあり得ません。", False),  # not the first sentence
        # a first sentence that only says the task cannot be done, without a reason
        ("その計算をすることはできません。", True),
        # ... or with a reason, when what cannot be done is the answering itself (guessing, judging)
        ("データがないので、推測することはできません。", True),
        ("記載されていないため、判断することはできません。", True),
        ("衛生上の理由から、ペットを持ち込むことはできません。", False),  # a reason and a rule: the answer
        ("私には判断できません。", True),
        ("この情報だけでは判断できませんが、一般的には午後が混みます。", False),  # a general answer follows
        ("その計算をすることはできません。ただし、概算なら計算できます。", False),
        ("私には感情がありません。", True),
        # a courtesy sentence (an apology) before the refusal, and a general answer after a disclaimer
        ("申し訳ございません。私にはその情報がありません。", True),
        ("申し訳ありませんが、正確な数字はわかりません。ただし、一般的には約30%と言われています。", False),
        ("私はAIなので個人的な意見はありませんが、一般的には次のような見方があります。", False),
        ("抱歉，我无法回答这个问题。", True),
    ],
)
def test_a_refusal_is_short_says_no_first_and_does_not_go_on(text: str, refusal: bool) -> None:
    assert is_refusal(text) is refusal


# --- reasoning ---------------------------------------------------------------------------------------

HARMONY = "<|channel|>analysis<|message|>考え中<|end|><|start|>assistant<|channel|>final<|message|>答え"


@pytest.mark.parametrize(
    ("text", "answer", "leak"),
    [
        ("答え", "答え", None),
        ("a<b>c", "a<b>c", None),
        ("<think>x</think>答え", "答え", "think block in the output"),
        ("<THINK>x</THINK>答え", "答え", "think block in the output"),
        ("<reasoning>x</reasoning>答え", "答え", "think block in the output"),
        ("<think>終わらない", "", "think block in the output"),
        ("x</think>答え", "答え", "closing think tag in the output"),
        ("<reasoning>r</reasoning>A</think>B", "B", "think block in the output"),
        # Two lone closing tags: everything up to the last one is reasoning, not only up to the first.
        ("案1</think>案2</think>答え", "答え", "closing think tag in the output"),
        ("x</think>y</reasoning>z</thinking>答え", "答え", "closing think tag in the output"),
        (HARMONY, "答え", "harmony channel token in the output"),
        ("<|channel|>final<|message|>答え<|return|>", "答え", "harmony channel token in the output"),
        ("Okay, so let me think about it.", "Okay, so let me think about it.", "output opens with reasoning"),
        # reasoning in no tag opens the output: its paragraph is set aside, the rest is the answer
        (
            "Okay, the user asks for the capital. I should answer in Japanese.\n\n東京です。",
            "東京です。",
            "output opens with reasoning",
        ),
        ("Let me think.\n\n", "Let me think.\n\n", "output opens with reasoning"),  # nothing after it
        (
            "ユーザーは要約を求めている。要約です。",
            "ユーザーは要約を求めている。要約です。",
            "output opens with reasoning",
        ),
        (
            "うーん、ユーザーは要約を求めている。",
            "うーん、ユーザーは要約を求めている。",
            "output opens with reasoning",
        ),
        ("嗯，用户想要一份总结。", "嗯，用户想要一份总结。", "output opens with reasoning"),
        ("嗯，我需要先分析这个问题。", "嗯，我需要先分析这个问题。", "output opens with reasoning"),
        # A filler alone opens speech, in character or not: no reasoning.
        (
            "うーん、私は彼のファンではないので分かりませんが。",
            "うーん、私は彼のファンではないので分かりませんが。",
            None,
        ),
        ("嗯，这是一个好问题。", "嗯，这是一个好问题。", None),
        ("x" * 200 + " Let me think", "x" * 200 + " Let me think", None),  # only the opening is read
        (" " * 188 + "Let me think.", " " * 188 + "Let me think.", "output opens with reasoning"),
        (" " * 189 + "Let me think.", " " * 189 + "Let me think.", None),  # 200 characters are read
    ],
)
def test_reasoning_is_stripped_and_named(text: str, answer: str, leak: str | None) -> None:
    assert strip_reasoning(text) == answer
    assert find_reasoning_leak(text) == leak


def test_only_the_answer_after_the_last_of_two_lone_closing_tags_is_judged() -> None:
    """Reasoning with two lone closing tags: the deliverable is what follows the second. Judged from the
    first, the second draft and its tag would count as answer characters (and as a second leak)."""
    draft = "まず要件を整理する。" * 3  # 30 characters of scratchpad, twice
    answer = "判定：合格"  # 5 characters
    text = f"{draft}</think>{draft}</think>{answer}"
    assert strip_reasoning(text) == answer
    result = check(text, Contract(min_chars=6, allow_reasoning=True))
    assert result.violation_types == ("too_short",)
    assert result.violations[0].detail == "5 chars < min_chars 6"
    assert check(text, Contract(max_chars=5, allow_reasoning=True)).check_errors == ()
    assert check(text, Contract(max_chars=5, allow_reasoning=True)).ok


def test_the_providers_reasoning_repeated_is_a_leak_from_thirty_characters() -> None:
    reasoning = "この問題について考える必要があります。まず最初に要件を確認して整理します。"
    answer = "回答：" + reasoning
    assert find_reasoning_leak(answer, reasoning) == "the provider's reasoning is repeated in the output"
    assert find_reasoning_leak(answer, reasoning[:30]) == "the provider's reasoning is repeated in the output"
    assert find_reasoning_leak(answer, reasoning[:29]) is None  # too short to tell from chance
    assert find_reasoning_leak("回答：別の内容です。", reasoning) is None
    spaced = " ".join(reasoning)  # whitespace does not hide it
    assert find_reasoning_leak(answer, spaced) == "the provider's reasoning is repeated in the output"
    assert (
        find_reasoning_leak(" ".join(answer), reasoning)
        == "the provider's reasoning is repeated in the output"
    )
    longer = reasoning + "それから結論を書きます。" * 3  # 73 characters
    assert find_reasoning_leak("回答：" + longer[:60] + "別の結論です。", longer) == (
        "the provider's reasoning is repeated in the output"
    )  # its first 60 characters are the probe


# --- claims ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "allowed", "kinds"),
    [
        ("導入企業300社が採用しています。", [], ["customer"]),
        (
            "Trusted by 300 customers. We are the leading platform.",
            [],
            ["customer", "customer", "superlative"],
        ),
        ("業界No.1のシェア。", [], ["superlative"]),
        ("Customer satisfaction is 98%. CPU usage is 97%.", [], ["percentage"]),  # a bare load is no claim
        ("The tests: 95% passed.", [], []),
        ("顧客満足度９８％を達成しました。", ["満足度98%"], []),  # NFKC on both sides
        ("顧客満足度９８％を達成しました。", ["  "], ["percentage"]),  # a blank phrase allows nothing
        ("Satisfaction is 98%. Our docs mention satisfaction is 98% too.", ["docs mention"], ["percentage"]),
        ("We are the world's first. Trusted by 300 customers.", ["WORLD'S FIRST"], ["customer", "customer"]),
        ("x" * 300 + " Trusted by many.", [], ["customer"]),  # far from the start
        ("İ" * 200 + " trusted by many", [], ["customer"]),  # lowercasing would change the length
        ("Trusted by many. İ", [], ["customer"]),
        # A non-ASCII text is scanned as written: each trigger in lower, capitalised, title and upper case.
        ("弊社は TRUSTED BY many teams です。", [], ["customer"]),
        ("弊社は the Number One choice です。", [], ["superlative"]),
        ("弊社は Used by 5 Companies です。", [], ["customer", "customer"]),
        ("Trusted by many.", [], ["customer"]),
        ("Trusted by many. " + "x" * 300 + " Trusted by all.", [], ["customer", "customer"]),  # once each
        ("CPU usage is 97%. Trusted by many.", [], ["customer"]),  # a bare load does not stop the reading
        # the sentence reaches 200 characters to the right at most
        ("Trusted by 300 teams " + "x " * 100 + "as audited.", ["as audited"], ["customer", "customer"]),
        ("Trusted by 300 teams " + "x " * 80 + "as audited.", ["as audited"], []),
    ],
)
def test_each_claim_counts_unless_an_allowed_phrase_is_in_its_sentence(
    text: str, allowed: list[str], kinds: list[str]
) -> None:
    assert find_claims(text, allowed) == kinds


def test_is_refusal_with_the_callers_compact_text_answers_as_without() -> None:
    """The caller's whitespace-free text changes nothing: the same verdict on many texts, those whose
    end of turn or template markup is cut off included (there the given compact text is not used)."""
    import random

    rng = random.Random(5)
    pieces = ["申し訳ありませんが、", "お答えできません。", "I'm sorry, but I can't help with that.", " ", "\n",
              "<|im_end|>", "[INST]", "ただし、仮に", "こんにちは。", "東京の人口は約1400万人です。" * 3,
              "x" * 150, "　", "<<SYS>>system<</SYS>>", "I cannot answer", "but I can"]  # fmt: skip
    texts = ["".join(rng.choice(pieces) for _ in range(rng.randrange(8))) for _ in range(3000)]
    for text in texts:
        assert is_refusal(text, "".join(text.split())) == is_refusal(text), text


# --- the claim triggers' prefilter -------------------------------------------------------------------


def test_the_trigger_prefilter_holds_each_cased_trigger_once() -> None:
    from tallyspan._engine._refusal import _KIND_OF_CASED_TRIGGER, _trigger_prefilter

    ascii_words, groups = _trigger_prefilter(_KIND_OF_CASED_TRIGGER)
    words = {trigger for trigger in _KIND_OF_CASED_TRIGGER if trigger.isascii()}
    others = {trigger for trigger in _KIND_OF_CASED_TRIGGER if not trigger.isascii()}
    assert {"Trusted", "NUMBER ONE", "%", "#"} <= words
    assert {"導入", "％", "パーセント"} <= others
    for word in words:  # every ASCII trigger, in any case, and nothing shorter
        assert ascii_words.fullmatch(word.lower().encode()), word
        assert not ascii_words.fullmatch(word.lower()[:-1].encode()), word
    assert not ascii_words.search(b"trust numbe one cent")
    assert ascii_words.search(b"xchosenx")
    # Each other trigger is in the first group whose lead it holds, with the rest of its distinct characters.
    leads = [lead for lead, _ in groups]
    assert len(set(leads)) == len(leads)
    assert sorted(trigger for _, rests in groups for _, trigger in rests) == sorted(others)
    for trigger in others:
        index = next(index for index, lead in enumerate(leads) if lead in trigger)
        rest_of = {held: rest for rest, held in groups[index][1]}
        assert sorted(rest_of[trigger]) == sorted(set(trigger) - {leads[index]}), trigger
    for _, rests in groups:
        for rest, _held in rests:
            assert len(set(rest)) == len(rest)
            kana = [("\u3040" <= char <= "\u30ff") for char in rest]
            assert kana == sorted(kana), rest  # han before kana
    # The most shared character leads first; kana lead only where a trigger has nothing else.
    assert groups[0] == ("用", (("利", "利用"), ("愛", "愛用"), ("採", "採用"), ("户", "用户")))
    assert [lead for lead in leads if "\u3040" <= lead <= "\u30ff"] == leads[-2:]
    assert ("％", (("", "％"),)) in groups


def _claim_texts(count: int, seed: int) -> list[str]:
    """Random texts from pieces of claims, of their triggers and of ordinary Japanese, Chinese and English,
    with characters whose case mapping is not ASCII's (İ ı ſ K ß), surrogates and astral characters."""
    import random

    from tallyspan._engine._refusal import _KIND_OF_CASED_TRIGGER

    rng = random.Random(seed)
    triggers = sorted(_KIND_OF_CASED_TRIGGER)
    pieces = [
        "今週は問い合わせ対応の流れを見直しました。", "东京的人口很多，我们可以看看。", "The report is ready. ",
        "導入企業300社が採用", "満足度９８％", "業界No.1", "trusted by 5 teams", "Used by 30 Companies", "#1",
        "世", "界", "日", "本", "用", "利", "ェ", "ア", "シ", "パ", "ー", "％", "＃", "業", "市", "場",
        "İ", "ı", "ſ", "\u212a", "ß", "Ｕｓｅｄ", "\ud800", "\udfff", "𠀀", "\x00", "\n", " ", "。", "1", "99",
        "ｔｒｕｓｔｅｄ", "ÜSED", "usé", "te\u0301ams",
    ]  # fmt: skip
    texts = ["", "a", "業界", "日本", "用"]
    for _ in range(count):
        parts = [rng.choice(pieces) for _ in range(rng.randrange(1, 12))]
        if rng.random() < 0.3:
            trigger = rng.choice(triggers)
            cut = rng.randrange(len(trigger) + 1)  # a trigger, or a trigger split by other text
            parts.insert(
                rng.randrange(len(parts) + 1),
                trigger[:cut] + rng.choice(["", "", "x", "の", " "]) + trigger[cut:],
            )
        texts.append("".join(parts))
    return texts


def test_the_trigger_prefilter_passes_every_text_the_trigger_scan_finds_one_in() -> None:
    from tallyspan._engine._refusal import _ANY_CASED_TRIGGER, _may_hold_trigger

    passed = skipped = 0
    for text in _claim_texts(6000, 13):
        if _ANY_CASED_TRIGGER.search(text):
            assert _may_hold_trigger(text), text
            passed += 1
        elif not _may_hold_trigger(text):
            skipped += 1
    assert passed > 1000
    assert skipped > 1000
    assert not _may_hold_trigger("今週は問い合わせ対応の流れを見直しました。毎週金曜日に件数を集計します。")
    assert _may_hold_trigger("業界x日本")
    assert not _may_hold_trigger("日x本")  # all of a trigger's characters, but not the trigger
    assert _may_hold_trigger("tRuStEd 漢")
    assert not _may_hold_trigger("日x")
    assert _may_hold_trigger("tru漢sted")  # a superset: the ASCII characters are read as one run


def test_claims_are_the_same_with_the_prefilter_as_with_every_text_scanned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tallyspan._engine import _refusal

    texts = _claim_texts(4000, 17)
    allowed = ["導入企業300社", "Trusted"]
    fast = [(find_claims(text, []), find_claims(text, allowed)) for text in texts]
    monkeypatch.setattr(_refusal, "_may_hold_trigger", lambda text: True)
    slow = [(find_claims(text, []), find_claims(text, allowed)) for text in texts]
    assert fast == slow
    assert sum(bool(kinds) for kinds, _ in slow) > 500  # claims are found, not only their absence


@pytest.mark.parametrize(
    "output",
    [
        "<think></think>\n東京は日本の首都です。人口は多いです。",
        "<think>\n\n</think>\n\n東京は日本の首都です。人口は多いです。",
        "</think>\n東京は日本の首都です。人口は多いです。",
        "\n</think>\n\n東京は日本の首都です。人口は多いです。",
    ],
)
def test_an_empty_think_block_or_a_bare_closing_tag_leaks_nothing(output: str) -> None:
    assert find_reasoning_leak(output) is None
    assert check(output, Contract(language="ja", min_chars=10)).violation_types == ()


def test_a_bare_think_tag_is_no_answer_and_no_leak_and_counts_no_characters() -> None:
    for output in ("<think>", "<think>\n</think>"):
        result = check(output, Contract(language="ja", min_chars=10))
        assert result.violation_types == ("too_short",), output
        assert [v.detail for v in result.violations] == ["0 chars < min_chars 10"]


def test_reasoning_before_a_lone_closing_tag_is_still_a_leak() -> None:
    assert find_reasoning_leak("The user wants the capital.\n</think>\n東京です。") == (
        "closing think tag in the output"
    )
    assert find_reasoning_leak("<think>\nThe user wants the capital.\n</think>\n東京です。") == (
        "think block in the output"
    )


_DECLINES = (
    "申し訳ありませんが、その質問にはお答えしかねます。",
    "私はAIなので、個人的な意見は持っておりません。",
    "その内容については回答を差し控えさせていただきます。",
    "不適切な内容が含まれるため、回答しません。",
    "恐れ入りますが、そのご要望にはお応えいたしかねます。",
    "ごめんなさい、それについてはわかりません。",
    "その質問に答えることは適切ではないと考えます。",
    "残念ながら、そのようなことはお手伝いできません。",
    "I apologize, but I'm not able to provide that information.",
    "I'm not comfortable providing an answer to this question.",
    "I won't be able to help with this.",
    "That's not something I can assist with.",
)


@pytest.mark.parametrize("text", _DECLINES)
def test_refusals_in_other_words_decline_object_or_defer_in_either_language(text: str) -> None:
    assert is_refusal(text)
    # Under a Japanese contract an English refusal is both: it says no, and not in Japanese.
    expected = (
        ("refusal",) if any("\u3040" <= char <= "\u30ff" for char in text) else ("not_japanese", "refusal")
    )
    assert check(text, Contract(language="ja")).violation_types == expected


# --- refusal by what it does ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        # English: the opening declines (any verb), and nothing after it answers
        "I'm not going to write that.",
        "I must respectfully decline this request.",
        "I don't feel comfortable answering that question.",
        "I'm unable to browse the internet or access current data.",
        "I won't be providing instructions for that. Please consult a professional.",
        "Sorry, I can't do this one, but I'm happy to help with something else.",
        # Japanese: an act of answering declined, in wordings the phrase list does not hold
        "それについては分かりかねます。専門家にご相談ください。",
        "大変恐縮ですが、そのようなご依頼には応じられません。",
        "その情報は持ち合わせておりません。",
        "申し訳ありませんが、そのリクエストには対応しておりません。",
        "ご期待に添えず申し訳ございません。この内容についてはお手伝いすることが難しいです。",
        "その質問に答えるのは難しいです。",
        "私には現在の株価を調べる手段がありません。",
        "リアルタイムの情報にはアクセスできないため、今日の天気はわかりません。",
        "個人を特定する情報の提供はご遠慮させていただいております。",
        "その依頼はお受けできません。",
        "ごめんなさい、それは教えられないんです。",
        "その種の質問には回答しないことになっています。",
        "「サマる」の意味は分かりません。",
        # deferring to someone else, with nothing else
        "恐れ入りますが、医療に関する判断は医師にご相談ください。",
        # an apology before an English decline of any act; telling or recommending declined; not
        # knowing, plainly; the role declined by an AI assistant
        "I apologize, but I'm not able to browse the internet for current restaurant information.",
        "Unfortunately, I'm unable to look that up.",
        "ラーメン屋の評価は人それぞれですので、私からお伝えすることは難しいです。",
        "特定のお店をおすすめすることはできかねます。",
        "ごめんなさい、それはちょっと分からないです。",
        "私はAIアシスタントなので、ラーメンを食べたことがありません。",
    ],
)
def test_a_refusal_in_any_wording_is_told_by_what_it_does(text: str) -> None:
    assert is_refusal(text)


@pytest.mark.parametrize(
    "text",
    [
        # the decline's own sentence goes on to answer
        "申し訳ありませんが、正確な数字は分かりません。ただ、一般的には約30%と言われています。",
        "宮崎駿のように話せるかはわかりませんが、彼の作品を見ると、常に新しいことを試しているようです。",
        "I can't give medical advice, but rest and plenty of fluids usually help with a cold.",
        "I apologize, but I'm not able to name one. However, Ichiran is popular with visitors.",
        "おすすめの店をお伝えすることは難しいですが、一般的には一蘭が人気です。",
        # not knowing as part of an answer
        "原因は分からないことが多いです。",
        # ... or a sentence after it does
        "I can't stress enough how important sleep is. Adults need seven to nine hours a night.",
        # the decline is quoted or named, not said
        "「分かりません」と答えるのが正直な場合もあります。",
        "分かりません、と答えるのが正直な場合もあります。",
        # an answer leads the sentence up to it
        "これらの例文は皮肉として解釈されることが多いと考えられますが、その理由は文中に明確に書かれておらず、わかりません。",
        # a rule or a fact, not a decline of ours
        "この薬はお酒と一緒に飲めません。肝臓への負担が大きくなるためです。",
        "はい、できます。手順は次の通りです。",
    ],
)
def test_a_decline_that_goes_on_to_answer_is_no_refusal(text: str) -> None:
    assert not is_refusal(text)


@pytest.mark.parametrize(
    ("text", "refusal"),
    [
        # a remark on the question, then the premise objected to, then only talk of being an AI
        (
            "それは非常に驚くべき体験ですね。私が人間として存在している限り、そのような状況はあり得ません。"
            "しかし、この問いは私がAIとして存在する現実を反映しています。",
            True,
        ),
        ("面白い質問ですね。そのような状況はあり得ません。", True),
        ("面白い質問ですね。申し訳ありませんが、お答えできません。", True),
        ("What a fascinating question! I can't answer that.", True),
        # a reason leads up to the objection: the puzzle's answer
        ("面白い質問ですね。3人とも嘘をついていることになるので、そのような状況はあり得ません。", False),
        # the objection, then the answer
        (
            "面白い質問ですね。そのような状況はあり得ません。AはBの父で、BはCの父なので、AはCの祖父です。",
            False,
        ),
        # a remark that says something is no courtesy: an answer came first
        ("答えは東京ですね。申し訳ありませんが、これ以上はお答えできません。", False),
        ("いい質問ですね。東京タワーの高さは333mです。", False),
    ],
)
def test_a_remark_on_the_question_before_a_decline_or_an_objection_is_courtesy(
    text: str, refusal: bool
) -> None:
    assert is_refusal(text) is refusal


def test_an_english_reasoning_paragraph_before_a_japanese_answer_is_a_leak_alone() -> None:
    # DEFINITIONS.md: the language types judge the deliverable with the leaked reasoning set aside.
    output = (
        "Okay, the user is asking about the capital of Japan. I should answer in Japanese.\n\n"
        "日本の首都は東京です。明治維新以降、政治の中心となっています。"
    )
    assert check(output, Contract(language="ja", min_chars=10)).violation_types == ("reasoning_leaked",)
