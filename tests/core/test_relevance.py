"""off_topic and answer_to_other_question, by hand: positives and hard negatives in ja, en and zh."""

from __future__ import annotations

import pytest

from tallyspan import Contract, check

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
    return check(output, prompt=prompt, **kwargs).violation_types  # type: ignore[arg-type]


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
