"""off_topic and answer_to_other_question, by hand: positives and hard negatives in ja, en and zh."""

from __future__ import annotations

import random

import pytest

from tallyspan import Contract, check
from tallyspan._engine._relevance import (
    _STOPWORDS,
    _Answer,
    _bigrams,
    _first_turn,
    _script,
    _tokens,
    _topic,
    off_topic_detail,
    other_question_detail,
    web_text_mark,
)

PROMPT_JA = (
    "経済成長率、消費者物価指数、失業率などの経済指標と日本銀行の金融政策との関係性を説明してください。"
    "その経済指標に影響を与える主な政策手段を示し、それぞれの効果について考察してください。"
)
ANSWER_JA = (
    "経済指標と金融政策は密接に関係しています。日本銀行は消費者物価指数の上昇率2%を目標に、政策金利の"
    "調整や量的緩和を行います。失業率が高いときは金融緩和で需要を支え、物価が上がり過ぎれば引き締めます。"
)
BLOG_JA = (
    "皆様、こんにちは。今日も雨が降ったり止んだりで梅雨らしい天気ですね。さて、先日購入したプラモデルを"
    "早速組み立ててみました。箱絵を見て一目惚れしたキットです。ランナーからパーツを切り離す作業が結構"
    "面倒ですが、デザインナイフを使うと少しだけ綺麗になりました。完成品はこちらです。塗装はせず素組みです。"
)
WEB_PAGE_JA = (
    "「2014年6月」の記事一覧（2 / 3ページ） | 株デイトレードブログ\n日経平均株価は続伸し1万5800円台で引けた。"
    "昨日の米国市場は休場だったが、東京市場は堅調なスタートとなり、その後も買い優勢の地合いは変わらず。"
)
PROMPT_ZH = "请解释光合作用的两个主要阶段，以及叶绿体在其中的作用。请给出具体的化学反应过程和能量转换。"
ANSWER_ZH = "光合作用分为光反应和暗反应两个阶段。光反应在叶绿体的类囊体膜上进行，把光能转换为化学能。"
NEWS_ZH = (
    "本周五，市中心举行了一年一度的美食节，吸引了数万名市民和游客前来品尝各地特色小吃。主办方表示，"
    "今年共有两百多家摊位参加，比去年增加了三成。许多市民表示，希望明年能够继续举办这样的活动。"
)
PROMPT_EN = (
    "Explain how the Bank of Japan uses interest rates and quantitative easing to reach its inflation target."
)
SOURCE_FILE = (
    '/*\nCopyright The Kubernetes Authors.\n\nLicensed under the Apache License, Version 2.0 (the "License");\n'
    "you may not use this file except in compliance with the License.\n*/\n\npackage fake\n\n"
    'import (\n\trest "k8s.io/client-go/rest"\n)\n\ntype FakeAutoscaling struct {\n\t*testing.Fake\n}\n'
)


def _types(output: str, prompt: str, **kwargs: object) -> tuple[str, ...]:
    result = check(output, prompt=prompt, **kwargs)  # type: ignore[arg-type]
    assert result.check_errors == ()  # a rule that raised judges nothing: the verdict would be hollow
    return result.violation_types


# --- off_topic -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("output", "prompt"),
    [
        (BLOG_JA, PROMPT_JA),  # a blog post that shares nothing with the question
        (WEB_PAGE_JA, PROMPT_JA),  # a scraped page: title | site
        (NEWS_ZH, PROMPT_ZH),  # unrelated news, in Chinese
        (SOURCE_FILE, PROMPT_JA),  # a source file nobody asked for
        ("Q:\n\nHow do I reverse an array in JavaScript?\n\nA:\n\nUse array.reverse(), it works in place and "
         "returns the array.", PROMPT_JA),  # a Q&A dump
        ("In this video, I will share five tips on how to start losing weight today. Drink more water, eat "
         "breakfast every day, and sleep well. Thanks for watching!", PROMPT_EN),
    ],
)  # fmt: skip
def test_an_answer_that_ignores_its_question_is_off_topic(output: str, prompt: str) -> None:
    result = check(output, prompt=prompt)
    assert result.check_errors == ()
    assert "off_topic" in result.violation_types
    detail = next(v.detail for v in result.violations if v.type.value == "off_topic")
    assert "プラモデル" not in detail
    assert result.failure_class in ("contract_violation", "language_corruption")


@pytest.mark.parametrize(
    ("output", "prompt"),
    [
        (ANSWER_JA, PROMPT_JA),
        (ANSWER_ZH, PROMPT_ZH),
        ("日本銀行は政策金利を下げ、国債を買い入れて物価目標2%を目指します。", PROMPT_JA),  # short: not judged
        # the topic in single kanji and different wording (侍: samurai, 性格/外見: character, looks)
        ("侍は背が高く、鋭い眼光を持つ。性格は厳格だが、弱い者には優しい。剣の腕は一流で、毎朝素振りを"
         "欠かさない。着物はいつも質素で、刀の手入れだけは怠らない。", "江戸時代の侍を主人公に持つ短編小説の"
         "登場人物を鮮やかに描写してください。その侍の性格、外見、特技、生き様を具体的に述べてください。"),
        # a follow-up question has no topic of its own
        (BLOG_JA, "先ほどの回答を修正し、各文に日本古典文学を連想させる言葉を取り入れてみてください。"),
        # an English answer to a Japanese question shares no bigrams, and is not off_topic for that
        ("The Bank of Japan targets 2% inflation. It lowers its policy rate and buys government bonds, which "
         "supports demand when unemployment is high and prices are weak; it tightens when prices overheat.",
         PROMPT_JA),
        # a refusal says no; it is refusal, not off_topic
        ("申し訳ありませんが、私はリアルタイムの情報を提供することはできません。最新の財務情報や業績に"
         "ついては、各企業のウェブサイトやニュースソースで確認することをお勧めします。", PROMPT_JA),
    ],
)  # fmt: skip
def test_answers_that_address_their_question_are_not_off_topic(output: str, prompt: str) -> None:
    assert "off_topic" not in _types(output, prompt)


def test_without_a_prompt_or_with_allow_off_topic_nothing_is_judged() -> None:
    assert "off_topic" not in check(BLOG_JA).violation_types
    assert "off_topic" not in check(BLOG_JA, Contract(allow_off_topic=True), prompt=PROMPT_JA).violation_types


def test_a_question_that_asks_for_a_web_page_gets_one() -> None:
    prompt = "次のページタイトルの形式「記事名 | サイト名」で、経済指標と金融政策のブログ記事の一覧を作ってください。"
    assert "off_topic" not in _types("金融政策の基本 | 経済ブログ\n経済指標の読み方 | 経済ブログ", prompt)


# --- answer_to_other_question --------------------------------------------------------------------


def _many_prompts(count: int) -> list[str]:
    topics = [
        "東京の人口動態",
        "量子もつれ",
        "光合成の仕組み",
        "独占禁止法",
        "ビジネスマナー",
        "機械学習の種類",
    ]
    return [
        f"{topics[i % len(topics)]}について、第{i}回の講義用に例を挙げて説明してください。"
        for i in range(count)
    ]


def test_an_answer_to_another_in_flight_prompt_is_named_after_it() -> None:
    own = "日本の独占禁止法が市場競争にどのような影響を与えているか、具体的な事例を挙げて説明してください。"
    other = "光合成の二つの段階と葉緑体の役割を、化学反応式とエネルギーの流れに触れながら説明してください。"
    answer = (
        "光合成は明反応と暗反応の二つの段階からなります。葉緑体のチラコイド膜で明反応が起こり、光の"
        "エネルギーでATPとNADPHができます。ストロマの暗反応では化学反応によって二酸化炭素から糖ができます。"
    )
    result = check(answer, prompt=own, other_prompts=[*_many_prompts(98), other])
    assert result.violation_types == ("answer_to_other_question",)
    assert "prompt #98" in result.violations[0].detail
    assert "answer_to_other_question" not in _types(answer, other, other_prompts=[own, *_many_prompts(98)])


def test_an_answer_matching_several_prompts_a_little_belongs_to_none() -> None:
    """With a hundred prompts in flight a generic answer matches some of them a little: no verdict."""
    answer = "例を挙げて説明します。第一に、東京の人口は増えています。第二に、機械学習にはいくつかの種類があります。"
    own = "日本の伝統的な茶道の作法と、その歴史的な背景について詳しく説明してください。"
    assert "answer_to_other_question" not in _types(answer, own, other_prompts=_many_prompts(100))


def test_web_text_is_off_topic_not_an_answer_to_another_prompt() -> None:
    other = "株式市場の日経平均株価の動きと米国市場の休場の影響について、ブログ記事を書いてください。"
    types = _types(WEB_PAGE_JA, PROMPT_JA, other_prompts=[other, *_many_prompts(50)])
    assert "answer_to_other_question" not in types
    assert "off_topic" in types


# --- the features, one by one ----------------------------------------------------------------------


def test_tokens_are_latin_words_of_three_letters_and_numbers_of_two_digits() -> None:
    assert _tokens("json, api-key café the and 7 42 123 ab abc") == {
        "json", "api", "key", "caf", "42", "123", "abc"
    }  # fmt: skip
    assert _tokens("x1 a2b") == {"a2b"}  # letters and digits make one word; "x1" is two characters


def test_bigrams_are_adjacent_kanji_or_katakana_only() -> None:
    assert _bigrams("経済の指標とアイス、a日本語") == {"経済", "指標", "アイ", "イス", "日本", "本語"}
    assert _bigrams("の経の") == frozenset()


@pytest.mark.parametrize(
    ("text", "script"),
    [
        ("漢字かな", "ja"),  # two kana make Japanese
        ("漢字漢か", "zh"),  # one kana is not enough
        ("日本 語学", "zh"),  # four CJK characters for two words: CJK
        ("a 日本語学", "zh"),
        ("a 日本語", "en"),
        ("a b 日本", "en"),  # two CJK characters for three words: English
        ("a b c d 日本語", "en"),
        ("plain English words", "en"),
        # A formula's symbols and numbers are no words: the question around it is Japanese.
        ("次の式の変数を挙げてください： y = ( 3 / 4 ) * x + 2 - 1", "ja"),
        ("y = ( 3 / 4 ) * x + 2 - 1 and the rest: 日本語", "en"),
    ],
)
def test_the_script_is_told_by_cjk_characters_per_word_and_kana(text: str, script: str) -> None:
    assert _script(text) == script


@pytest.mark.parametrize(
    ("output", "answer"),
    [
        ("  答えです。  ", "答えです。"),
        ("答えです。<|im_end|>次の質問です。", "答えです。"),  # the first turn only
        ("[INST]答えです。[/INST]", "答えです。"),  # markup is no word of the answer
        ("答え<|eot_id|>[INST] 次 [/INST]", "答え"),
        ("前<<SYS>>指示<</SYS>>後", "前 後"),
        ("あ" * 1600, "あ" * 1500),  # read this far
    ],
)
def test_the_answer_is_its_first_turn_without_markup(output: str, answer: str) -> None:
    assert _first_turn(output) == answer


def test_an_answers_words_are_lowercased_and_its_pairs_indexed_on_demand() -> None:
    answer = _Answer("Tea CEREMONY 茶道")
    assert answer.tokens == {"tea", "ceremony"}
    assert answer._index is None
    answer.index()
    # Only kanji and katakana pairs are ever looked up, and they have no case: the text is indexed as written.
    assert answer._index == frozenset(
        ["Te", "ea", "a ", " C", "CE", "ER", "RE", "EM", "MO", "ON", "NY", "Y ", " 茶", "茶道"]
    )  # fmt: skip
    assert "script" not in vars(answer)  # counted only when off_topic needs it
    assert answer.script == "en"


def test_a_web_text_mark_the_prompt_shares_is_no_mark() -> None:
    assert web_text_mark("【お知らせ】本日は休業です。") == "page title"
    assert web_text_mark("【お知らせ】本日は休業です。", "【質問】休業日は？") is None
    assert web_text_mark("ホーム > 製品 > 価格表", "価格を教えて") == "breadcrumbs"
    assert web_text_mark("本日は休業です。") is None


# --- off_topic, threshold by threshold -------------------------------------------------------------
# Made-up kanji words give exact counts: each word is two ideographs no other word uses, so it is one
# content bigram and two kanji; hiragana between the words carries no feature.


def _words(first: int, count: int) -> list[str]:
    return [chr(0x6C00 + 2 * index) + chr(0x6C01 + 2 * index) for index in range(first, first + count)]


def _ja_prompt(count: int, extra: str = "") -> str:
    return "と".join(_words(0, count)) + extra + "についておしえてください。"


def _ja_answer(shared: int = 0, kanji: int = 0, own: int = 20, head: str = "") -> str:
    """``own`` words of its own, ``shared`` of the prompt's words, and ``kanji`` single kanji of the prompt's."""
    single = [word[1] for word in _words(shared, kanji)]
    return head + "の".join([*_words(100, own), *_words(0, shared), *single]) + "です。"


MARK = "【お知らせ】"  # a page title


def _zh_prompt(count: int) -> str:
    return "，".join(_words(0, count)) + "？"


def _zh_answer(kanji: int) -> str:
    return "，".join([*_words(100, 20), *(word[1] for word in _words(0, kanji))]) + "。"


def test_the_made_up_words_have_the_counted_features() -> None:
    topic = _topic(_ja_prompt(10))
    assert (topic.size, len(topic.kanji), topic.script) == (10, 20, "ja")
    assert (_topic(_zh_prompt(10)).script, _Answer(_zh_answer(2)).script) == ("zh", "zh")
    assert len(_bigrams(_ja_answer())) == 20


@pytest.mark.parametrize(
    ("answer", "detail"),
    [
        (_ja_answer(), "shares 0 of the prompt's 10 topic features, 0% of its kanji"),
        (_ja_answer(own=19), None),  # too short to be expected to share a bigram
        (_ja_answer(shared=1), "shares 1 of the prompt's 10 topic features, 10% of its kanji"),
        (_ja_answer(shared=2), None),  # two shared features are a topic
        (_ja_answer(kanji=2), "shares 0 of the prompt's 10 topic features, 10% of its kanji"),
        (_ja_answer(kanji=3), None),  # 15 % of the kanji
        (_ja_answer(shared=1, kanji=1), None),  # one feature and 15 % of the kanji
        (_ja_answer(kanji=4), None),  # 20 %: under Chinese's limit, over Japanese's
        # with a web-text mark: up to three shared features, under 25 % of the kanji
        (_ja_answer(shared=2, head=MARK), "page title; shares 2 of the prompt's 10 topic features, 20% of its kanji"),
        (_ja_answer(shared=2, kanji=1, head=MARK), None),  # 25 %
        (_ja_answer(kanji=6, head=MARK), "page title; shares 0 of the prompt's 10 topic features, 30% of its kanji"),
        (_ja_answer(shared=3, head=MARK), None),  # 30 % and shared
    ],
)  # fmt: skip
def test_off_topic_in_the_same_script_at_each_threshold(answer: str, detail: str | None) -> None:
    assert off_topic_detail(answer, _ja_prompt(10)) == detail


def test_with_a_web_text_mark_three_shared_features_are_off_topic_and_four_are_not() -> None:
    prompt = _ja_prompt(20)
    assert off_topic_detail(_ja_answer(shared=3, head=MARK), prompt) == (
        "page title; shares 3 of the prompt's 20 topic features, 15% of its kanji"
    )
    assert off_topic_detail(_ja_answer(shared=4, head=MARK), prompt) is None


@pytest.mark.parametrize(("kanji", "off"), [(4, True), (5, True), (6, False)])
def test_chinese_tolerates_more_shared_han_than_japanese(kanji: int, off: bool) -> None:
    detail = off_topic_detail(_zh_answer(kanji), _zh_prompt(10))
    assert detail == (
        f"shares 0 of the prompt's 10 topic features, {kanji * 5}% of its kanji" if off else None
    )


def test_a_short_question_is_judged_only_against_marked_text_that_shares_nothing() -> None:
    assert off_topic_detail(_ja_answer(head=MARK), _ja_prompt(2)) is None
    assert off_topic_detail(_ja_answer(head=MARK), _ja_prompt(3)) == (
        "page title; shares none of the prompt's 3 topic features"
    )
    assert off_topic_detail(_ja_answer(head=MARK), _ja_prompt(7)) == (
        "page title; shares none of the prompt's 7 topic features"
    )
    assert off_topic_detail(_ja_answer(), _ja_prompt(7)) is None  # no mark
    assert off_topic_detail(_ja_answer(shared=1, head=MARK), _ja_prompt(7)) is None  # shares one


def test_a_question_without_kanji_is_judged_by_its_katakana() -> None:
    prompt = "アイスクリームとチョコレートとキャンディーについておしえてください。"
    assert (_topic(prompt).size, _topic(prompt).kanji) == (16, frozenset())
    assert (
        off_topic_detail(_ja_answer(), prompt)
        == "shares 0 of the prompt's 16 topic features, 0% of its kanji"
    )


def test_eight_features_make_a_full_question() -> None:
    assert off_topic_detail(_ja_answer(shared=1), _ja_prompt(8)) == (
        "shares 1 of the prompt's 8 topic features, 12% of its kanji"
    )
    assert off_topic_detail(_ja_answer(head=MARK), _ja_prompt(8)) == (
        "shares 0 of the prompt's 8 topic features, 0% of its kanji"
    )


_NATO_TEXT = (
    "alfa bravo charlie delta echo foxtrot golf hotel india juliett kilo lima mike november oscar papa "
    "quebec romeo sierra tango uniform victor whiskey xray yankee zulu"
)
NATO = _NATO_TEXT.split()


def _en_answer(words: int, head: str = "") -> str:
    return head + " ".join((NATO * 2)[:words])


@pytest.mark.parametrize(
    ("answer", "detail"),
    [
        (_en_answer(13, "Click here: "), "web boilerplate; shares none of the prompt's 11 topic features"),
        (_en_answer(12, "Click here: "), None),  # 14 words: too short to judge across languages
        (_en_answer(40), None),  # no mark, and it may use other names
        (_en_answer(15, "Click here for gdp: "), None),  # shares the prompt's GDP
    ],
)
def test_an_answer_in_another_language_is_judged_by_its_marks(answer: str, detail: str | None) -> None:
    assert off_topic_detail(answer, _ja_prompt(10, "とGDP")) == detail


def test_an_answer_in_another_cjk_script_is_judged_by_its_marks_whatever_its_length() -> None:
    assert off_topic_detail(_ja_answer(own=3, head=MARK), _zh_prompt(10)) == (
        "page title; shares none of the prompt's 10 topic features"
    )


@pytest.mark.parametrize(
    ("extra", "words", "detail"),
    [
        ("とCEOと2021年", 50, "uses none of the prompt's 2 names and numbers"),
        ("とCEOと2021年", 49, None),  # a shorter answer may leave the names out
        ("とCEOと42年", 50, None),  # a two-digit number is no anchor: one is not enough
    ],
)
def test_a_long_answer_in_another_language_must_use_one_of_the_questions_names(
    extra: str, words: int, detail: str | None
) -> None:
    assert off_topic_detail(_en_answer(words), _ja_prompt(10, extra)) == detail
    assert off_topic_detail(_en_answer(words - 1) + " ceo", _ja_prompt(10, extra)) is None


def test_a_mark_the_question_shares_is_no_evidence() -> None:
    prompt = "【Q】 Summarise quarterly revenue growth drivers"
    assert _topic(prompt).size == 5
    assert off_topic_detail(_en_answer(20, "【News】 "), prompt) is None
    assert off_topic_detail(_en_answer(20, "【News】 "), "Summarise quarterly revenue growth drivers") == (
        "page title; shares none of the prompt's 5 topic features"
    )


# --- answer_to_other_question, threshold by threshold ----------------------------------------------

OWN = "Describe tea ceremony history around Kyoto temples"  # six features
OTHER = "Explain photosynthesis chlorophyll glucose oxygen carbon sunlight leaves roots water"  # ten
THIRD = "Summarise tariffs exports imports currency inflation deficit bonds yields markets"  # ten


def _covering(prompt: str, count: int) -> str:
    """An answer in capitals holding the first ``count`` words of ``prompt``'s features."""
    return "ANSWER: " + " ".join(prompt.split()[:count]).upper() + "."


def test_half_of_the_other_prompt_and_five_features_name_it() -> None:
    assert other_question_detail(_covering(OTHER, 5), OWN, [OTHER]) == (
        "matches in-flight prompt #0 (0.50) better than its own (0.00)"
    )
    assert other_question_detail(_covering(OTHER, 4), OWN, [OTHER]) is None


def test_a_runner_up_within_half_of_the_best_match_blocks_the_verdict() -> None:
    answer6 = _covering(OTHER, 6)
    assert other_question_detail(answer6 + _covering(THIRD, 3), OWN, [THIRD, OTHER]) == (
        "matches in-flight prompt #1 (0.60) better than its own (0.00)"
    )
    assert other_question_detail(answer6 + _covering(THIRD, 4), OWN, [THIRD, OTHER]) is None
    assert other_question_detail(answer6 + _covering(THIRD, 4), OWN, [OTHER, THIRD]) is None


def test_an_answer_covering_a_tenth_of_its_own_prompt_may_still_answer_another() -> None:
    own = "Outline railway signalling safety interlocking staff timetables drivers depots audits"
    assert _topic(own).size == 10
    assert other_question_detail(_covering(OTHER, 6) + " railway", own, [OTHER]) == (
        "matches in-flight prompt #0 (0.60) better than its own (0.10)"
    )
    assert other_question_detail(_covering(OTHER, 6) + " railway signalling", own, [OTHER]) is None


def test_an_own_prompt_without_features_counts_as_not_covered() -> None:
    assert other_question_detail(_covering(OTHER, 6), "Go on.", [OTHER]) == (
        "matches in-flight prompt #0 (0.60) better than its own (0.00)"
    )


def test_prompts_under_five_features_neither_win_nor_compete() -> None:
    five = "Compare sonnets haiku limericks ballads"
    assert other_question_detail(_covering(five, 5), OWN, [five]) == (
        "matches in-flight prompt #0 (1.00) better than its own (0.00)"
    )
    four = "Compare sonnets haiku limericks"
    assert other_question_detail(_covering(four, 4), OWN, [four]) is None
    answer = _covering(four, 4) + _covering(OTHER, 6)
    assert other_question_detail(answer, OWN, [four, OTHER]) == (
        "matches in-flight prompt #1 (0.60) better than its own (0.00)"
    )


def test_the_same_output_for_another_prompt_has_a_fixed_detail() -> None:
    output = "The verdict is APPROVE, with all the required fields."
    assert other_question_detail(output, OWN, other_answers=[(OTHER, output)]) == (
        "the same output was returned for a different prompt"
    )
    assert other_question_detail(output, OWN, other_answers=[(f"  {OWN} ", output)]) is None
    assert other_question_detail(output, None, [OTHER], [(OTHER, output)]) is None


def _tokens_by_lowering(text: str) -> frozenset[str]:
    """The plain way: lowercase the ASCII view, keep letters and digits, split."""
    view = text.encode("ascii", "replace").lower()
    kept = bytes(byte if 0x30 <= byte <= 0x39 or 0x61 <= byte <= 0x7A else 0x20 for byte in view)
    return frozenset(
        word
        for word in kept.decode("ascii").split()
        if (word.isdigit() and len(word) >= 2)
        or (len(word) >= 3 and not word.isdigit() and word not in _STOPWORDS)
    )


def test_tokens_match_the_plain_lowering_on_many_texts() -> None:
    rng = random.Random(7)
    alphabet = "abcXYZ019 ,.-_\n\t?@[`{日本語のテキストＡＢＣ１２é"
    texts = ["", "   ", "日本語だけ", "The API and JSON 2024", "ΣIGMA Straße ﬁle KELVIN"]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randrange(60))) for _ in range(3000)]
    for text in texts:
        assert _tokens(text) == _tokens_by_lowering(text), text


def test_the_same_refusal_for_many_prompts_is_a_refusal_each_time_not_another_tasks_answer() -> None:
    """A refusal answers no question (DEFINITIONS: answer_to_other_question is an answer that belongs to
    another prompt): a server refusing every prompt alike is ``refusal`` on each call, counted once."""
    refusal = "I'm sorry, but I can't help with that request."
    contract = Contract(language="en")
    result = check(refusal, contract, prompt=OWN, other_answers=[(OTHER, refusal)])
    assert result.violation_types == ("refusal",)
    answer = "The verdict is APPROVE, with all the required fields."
    repeated = check(answer, contract, prompt=OWN, other_answers=[(OTHER, answer)])
    assert repeated.violation_types == ("answer_to_other_question",)


def test_an_answer_has_enough_bigrams_exactly_when_the_set_of_all_of_them_is_large_enough() -> None:
    import random

    from tallyspan._engine._relevance import _bigrams, _has_bigrams

    rng = random.Random(7)
    alphabet = "漢字日本語カタカナかなabc 。\n𠀀々ｶﾅ"
    texts = [
        "",
        "漢",
        "漢字",
        "漢字漢字漢字",
        *("".join(rng.choices(alphabet, k=rng.randint(0, 80))) for _ in range(300)),
    ]
    for text in texts:
        for count in (-1, 0, 1, 2, 5, 20, 200):
            assert _has_bigrams(text, count) == (len(_bigrams(text)) >= count), (text, count)


# --- non-answers by their form, and vocabulary against the other prompts in flight --------------------

_RETURNS = "返品の手続きを教えてください。"
_CURRY = (
    "カレーの作り方を紹介します。まず玉ねぎを薄切りにして、飴色になるまでじっくり炒めます。次に一口大に切った"
    "鶏肉を加え、表面に焼き色がつくまで炒めましょう。にんじんとじゃがいもを加えてさらに炒め、水を注いで中火で"
    "煮込みます。アクを丁寧に取り除きながら、野菜が柔らかくなるまで二十分ほど煮ます。火を止めてからルウを割り"
    "入れ、よく溶かしてから再び弱火で十分ほど煮込めば完成です。隠し味にはちみつやコーヒーを少し加えると、コク"
    "が出て一段とおいしくなります。ご飯と一緒に盛り付け、お好みで福神漬けを添えてお召し上がりください。翌日"
    "には味がなじんでさらにおいしくなるので、多めに作っておくのもおすすめです。冷凍保存もできますので、小分け"
    "にして保存袋に入れておくと便利です。"
)


def test_a_question_about_a_procedure_is_not_a_follow_up_and_a_recipe_does_not_answer_it() -> None:
    # 手続き holds 続き; the question states its own topic, and a long answer using none of its words
    # answers something else.
    assert off_topic_detail(_CURRY, _RETURNS) == "uses none of the prompt's 3 content words"


def test_a_question_that_refers_to_the_text_above_is_a_follow_up_and_is_not_judged() -> None:
    assert off_topic_detail(_CURRY, "上記を表現した寓話的な詩を作成してください。") is None


def test_an_answer_that_only_echoes_its_prompt_is_off_topic() -> None:
    prompt = (
        "東京湾に架かるレインボーブリッジの工事が行われたとき、どのような観点が重要だったか述べてください。"
    )
    echoed = "<<SYS>>\nあなたは役立つアシスタントです。\n<</SYS>>\n\n" + prompt[:30]
    assert off_topic_detail(echoed, prompt) == "echoes the prompt and adds nothing"
    # An echoed instruction followed by a short answer is an answer.
    assert off_topic_detail(prompt[:40] + "\n[1, 3, 3]", prompt) is None


def test_a_reply_of_chat_markup_alone_is_off_topic() -> None:
    reply = "<<SYS>>\nあなたは役立つアシスタントです。\n<</SYS>>"
    assert off_topic_detail(reply, _RETURNS) == "only chat-template markup, no answer"


def test_an_offer_to_help_with_questions_back_answers_nothing() -> None:
    offers = (
        "Sure, I'd be happy to help! Can you tell me more about the problem?",
        "わかりました、私はあなたにそれを説明することができます。",
        "こんにちは！お手伝いしたいと思います。まず、あなたの状況を教えていただけますか？",
        "Absolutely! I'd love to help you understand probability. Let me know if there is anything else.",
        # Padded with empty list items, it is no longer for them.
        "Sure, I'd be happy to help! Can you tell me more about the problem?\n\n" + "-  \n" * 150,
    )
    for reply in offers:
        assert off_topic_detail(reply, _RETURNS) == "offers help or asks back, and answers nothing", reply
    # A bare yes answers a yes-or-no question.
    assert off_topic_detail("Sure.", _RETURNS) is None
    assert off_topic_detail("はい。", _RETURNS) is None
    # An answer that starts by offering help, or one that mentions being glad, answers.
    assert (
        off_topic_detail("喜んでお手伝いします。返品は購入から30日以内に窓口でお手続きください。", _RETURNS)
        is None
    )
    assert (
        off_topic_detail("前提は、男性が女性に赤いバラを贈り、女性がそれを喜んでいることです。", _RETURNS)
        is None
    )
    assert (
        off_topic_detail(
            "I am happy to help. Your first request is 'I hope the waistband stays loose'.", _RETURNS
        )
        is None
    )


def test_an_answer_matching_the_other_prompts_as_well_as_its_own_is_off_topic() -> None:
    """Twelve unrelated prompts in flight; an event announcement shares one word with its own question
    (開催) and as much with half of the others as with it."""
    own = "来月開催される映画祭の審査基準について、評価の観点を三つ挙げて説明してください。"
    others = [
        f"{topic}について開催の予定を含めて説明してください。"
        for topic in ("梅雨の天気", "株式市場の動向", "江戸時代の文化", "新しい料理の作り方", "読書感想文の書き方",
                      "量子コンピュータの原理", "健康的な睡眠", "旅行の計画", "転職の準備", "植物の育て方",
                      "子供の教育", "地球温暖化の影響")
    ]  # fmt: skip
    announcement = (
        "お疲れ様です。本日は、来週開催されるイベントについてご紹介します。興味がある方は、ぜひ参加をご検討ください。"
        "オンラインでの開催となり、参加費は無料です。申し込みはウェブサイトから受け付けています。"
    )
    assert off_topic_detail(announcement, own) is None  # without other prompts it cannot be told
    found = off_topic_detail(announcement, own, others)
    assert found is not None
    assert found.startswith("matches "), found
    # An answer about its own question matches it better than the others.
    answer = "映画祭の審査では、作品の独創性、演出と映像の完成度、そして観客への訴求力という三つの観点で評価します。"
    assert off_topic_detail(answer, own, others) is None


_DOGMA = (
    "分子生物学の中心的ドグマとは何ですか？どのようなプロセスが関与していますか？これを名付けたのは誰ですか？"
)
_IN_FLIGHT = [
    f"{topic}について、具体的な例を挙げて説明してください。"
    for topic in ("梅雨の天気と農業", "株式市場の動向と金利", "江戸時代の町人文化", "新しい料理の作り方と食材",
                  "読書感想文の書き方と構成", "量子コンピュータの原理", "健康的な睡眠と生活習慣",
                  "海外旅行の計画と予算", "転職の準備と面接", "植物の育て方と肥料", "子供の教育と遊び",
                  "地球温暖化の影響と対策")
]  # fmt: skip


def test_a_long_text_that_uses_its_questions_rare_words_no_more_than_the_others_is_off_topic() -> None:
    """A sports report shares one word with a biology question (中心) and, by chance, words of the other
    questions in flight: long enough to have used the question's rare words, it used none of them."""
    report = (
        "女子カーリングの日本代表選考会が北海道で行われ、地元のチームが優勝した。当日は天気にも恵まれ、会場には"
        "連日多くの観客が詰めかけた。決勝では序盤から主導権を握り、第八エンドに三点を奪って試合を決めた。チームの"
        "中心として活躍したスキップは「準備してきたことが出せた。支えてくれた家族や地域の皆さんに感謝したい」と"
        "話した。大会は市場の関係者や企業の支援で開かれ、地元の子供たちも声援を送った。チームは来月から海外遠征"
        "に出発し、予算の計画を立てて世界選手権に向けた調整を続ける。監督は「生活の影響もあったが、課題だった"
        "後半の試合運びが改善できた。対策を重ねて世界の舞台でも自分たちのカーリングをしたい」と抱負を語った。"
        "次の大会は秋に予定されており、チームは地域の文化として競技を広めることも目指している。"
    )
    assert len(report) >= 300
    found = off_topic_detail(report, _DOGMA, _IN_FLIGHT)
    assert found is not None
    assert found.startswith("uses its prompt's rare words"), found
    answer = (
        "分子生物学の中心的ドグマとは、遺伝情報がDNAからRNAへ、RNAからタンパク質へと一方向に流れるという原則です。"
        "関与するプロセスは三つあります。まずDNAの複製で、細胞分裂の前に遺伝情報が写し取られます。次に転写で、"
        "DNAの塩基配列をもとにメッセンジャーRNAが合成されます。最後に翻訳で、リボソームがRNAの情報を読み取り、"
        "アミノ酸をつないでタンパク質を作ります。この考え方を名付けたのは、DNAの二重らせん構造を発見した一人で"
        "あるフランシス・クリックで、一九五八年のことでした。のちに逆転写酵素が見つかり、RNAからDNAへ情報が"
        "流れる例外も知られるようになりました。それでも、情報の流れの基本を示す枠組みとして今も教科書に載っています。"
    )
    assert len(answer) >= 300
    assert off_topic_detail(answer, _DOGMA, _IN_FLIGHT) is None
    # Without other prompts in flight there is nothing to weigh the words by: the report is not judged.
    assert off_topic_detail(report, _DOGMA) is None


def test_loanwords_are_one_word_with_their_source_word() -> None:
    from tallyspan._engine._words import analyser_available, content_words

    if not analyser_available():
        pytest.skip("the optional analyser (tallyspan[ja]) is not installed")
    assert content_words("アニメ") == content_words("アニメーション") == frozenset({"animation"})
    assert content_words("コンピュータとコンピューター") == frozenset({"computer"})
    assert content_words("computer") == frozenset({"computer"})


_BOOKS = "おすすめの本を3冊、理由と一緒に教えてください。"
_ASKS_BACK = "offers help or asks back, and answers nothing"


@pytest.mark.parametrize(
    ("reply", "prompt", "detail"),
    [
        # a question thrown back, in any length up to a paragraph
        ("どんなジャンルの本がお好きですか？", _BOOKS, _ASKS_BACK),
        (
            "まず、普段はどのくらい本を読みますか？次に、最近読んで面白かった本は何でしょう？",
            _BOOKS,
            "asks questions back and answers nothing",
        ),
        ("What kind of books do you usually enjoy?", _BOOKS, _ASKS_BACK),
        ("ありがとうございます。あなたは何歳ですか？", _BOOKS, _ASKS_BACK),
        # past the length of an offer's reply (250 characters), still only questions
        (
            "ありがとうございます。" + "あなたが最近読んだ本の中で、一番心に残った場面はどこでしたか？" * 8,
            _BOOKS,
            "asks questions back and answers nothing",
        ),
        # the task rewritten as a new instruction or an exam question
        (
            "以下の文章を読んで、筆者の主張を100字以内でまとめてください。",
            _BOOKS,
            "sets the reader a new task instead of answering",
        ),
        (
            "問題：\n上記の文章の空欄に入る最も適切な語を選び、その理由を答えなさい。",
            _BOOKS,
            "sets the reader a new task instead of answering",
        ),
        # not questions back: a hedged answer, a suggestion, a formula's placeholder
        ("答えは『星の王子さま』ではないでしょうか。", _BOOKS, None),
        ("まずは短い小説から読んでみてはいかがでしょうか？", _BOOKS, None),
        ("答えは 11 でしょうか。", _BOOKS, None),
        ("(1/3 × 33) × 210 ÷ 100 = ?", "次の文を数式で表してください：1を3で割り、33を掛ける。", None),
        # an answer followed by a question is an answer
        ("『ハリー・ポッター』がおすすめです。他に知りたいことはありますか？", _BOOKS, None),
        # a list of questions is a deliverable; so are questions the prompt asked for or gave to correct
        (
            "- 長さはどれくらいが最適？\n- 重さはどう選ぶ？",
            "スキーストックの選び方について、よくある疑問を挙げて。",
            None,
        ),
        ("志望動機は何ですか？", "面接でよく聞かれる質問を一つ教えてください。", None),
        (
            "彼はその時、何を決めたのですか？",
            "不自然な文を自然な文に直してください：彼はちょうど何を決めたのですか？",
            None,
        ),
        ("今どこにいるの？", "次の英文を日本語に翻訳してください：Where are you now?", None),
    ],
)
def test_a_question_thrown_back_or_a_task_set_anew_answers_nothing(
    reply: str, prompt: str, detail: str | None
) -> None:
    assert off_topic_detail(reply, prompt) == detail


_COUNT = (
    "下記の段落を読み、「アマゾン」、「川」、「生物」が何回出現するか数えてください。\n"
    "アマゾンは自然の驚異が広がる地域で、アマゾン川が流れています。川は無数の生物に生命を与えています。"
)
_NEW_MATERIAL = (
    "人間は宇宙の一部であり、未来は人間の可能性を示すものです。人間は宇宙の広大な空間を探求します。"
)
_REWRITTEN = "rewrites its task as a new instruction instead of answering"


@pytest.mark.parametrize(
    ("reply", "prompt", "detail"),
    [
        # the prompt's request with new terms, then new material: a new exercise, no answer
        (
            "以下の文章を読んで、「人間」、「宇宙」、「未来」が何回出現するか数えてください。\n"
            + _NEW_MATERIAL,
            _COUNT,
            _REWRITTEN,
        ),
        # ... of any length, and after a task label
        (
            "問題：以下の文章を読んで、「人間」、「宇宙」、「未来」が何回出現するか数えてください。\n"
            + _NEW_MATERIAL * 12,
            _COUNT,
            _REWRITTEN,
        ),
        # the task restated in the prompt's own words, then the answer
        (
            "下記の段落で、「アマゾン」、「川」、「生物」が何回出現するか数えてください。\nアマゾン、2\n川、2\n生物、1",
            _COUNT,
            None,
        ),
        # the task quoted as it was given, then the answer
        (
            "下記の段落を読み、「アマゾン」、「川」、「生物」が何回出現するか数えてください。\n川、2\nアマゾン、2\n生物、1",
            _COUNT,
            None,
        ),
        # an answer that opens with an instruction of its own, not shaped like the prompt's
        (
            "以下の手順でルーターを再起動してください。\n1. 電源を抜く\n2. 30秒待つ\n3. 電源を入れる",
            "Wi-Fiに繋がらなくなりました。自宅のルーターの調子が悪いようです。どうしたらいいですか？",
            None,
        ),
        # a prompt that asks for exercises is answered by one
        (
            "以下の文章を読んで、「人間」、「宇宙」、「未来」が何回出現するか数えてください。\n"
            + _NEW_MATERIAL,
            "下記の段落を読み、単語が何回出現するか数える練習問題を作ってください。",
            None,
        ),
    ],
)
def test_the_task_rewritten_about_new_material_answers_nothing(
    reply: str, prompt: str, detail: str | None
) -> None:
    assert off_topic_detail(reply, prompt) == detail
