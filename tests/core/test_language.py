"""The language rules: Japanese hard cases by hand, and the hand-labelled shared lang-cases."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tallyspan import Contract, check
from tallyspan._engine._hanzi_table import CHINESE_ONLY, RARE_IN_JAPANESE
from tallyspan._engine._language import english_requested, language_violations, profile, requested_languages
from tallyspan._engine._taxonomy import ViolationType


def _types(text: str, required: str = "ja") -> list[str]:
    return sorted(str(violation_type) for violation_type, _ in language_violations(text, required))


@pytest.mark.parametrize(
    "text",
    [
        "判定：合格",
        "第三四半期売上報告",
        "現在在庫数：五百個",
        "完了",
        "株式会社山田製作所　代表取締役社長　山田太郎",
        "効率的な運用と具体的な改善策について、技術的課題と経済的影響の両面から検討しました。",
        "OpenTelemetryのSpanProcessorを使って、各LLM呼び出しの出力を検証します。",
        "詳細は https://example.com/docs/getting-started/install-guide を参照してください。",
        "`pip install opentelemetry-sdk` を実行してから、`config.yaml` を編集してください。",
        "中国語で「谢谢」は「ありがとう」という意味です。",
        "华为（ファーウェイ）の新製品について調査しました。",
        "基準率の無視（base rate neglect）は認知バイアスです。",
        "ニンテンドースイッチ vs PS5：価格",
        "競合3社（A社・B社・C社）の料金を比較し、A社を推奨します。",
        "エラーログは以下の通りです。\n```\nTraceback (most recent call last):\nValueError: invalid literal\n```\n"
        "原因は入力値です。",
        '```json\n{"verdict": "APPROVE", "reason": "予算内であり、要件を満たしている"}\n```',
        "",
        "🎉🎉🎉",
    ],
)
def test_japanese_hard_cases_are_clean(text: str) -> None:
    assert _types(text) == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("本件の調査結果をまとめました。我们认为这个方案是目前最好的选择。", ["chinese_in_japanese"]),
        ("報告書を提出しました。我在日本工作三年了。", ["chinese_in_japanese"]),
        ("資料を送付します。請參考附件資料。", ["chinese_in_japanese"]),
        ("## 结论\n本提案を採用すべきです。", ["chinese_in_japanese"]),
        ("胃炎、胆石症、結肠炎などがあります。", ["chinese_in_japanese"]),
        ("我们认为这个方案是目前最好的选择。", ["not_japanese"]),
        ("好的", ["not_japanese"]),
        ("我在日本工作三年了。", ["not_japanese"]),
        ("Here is the summary of the quarterly report.", ["not_japanese"]),
        ("The Japanese word 「ありがとう」 means thank you.", ["not_japanese"]),
        # Chinese prose that names Japanese words: a few kana (quoted or as headings) among much han.
        (
            '"じまん" 和 "ほこり" 这两个词在日语中都有多种含义，但通常它们并不具有直接的积极或消极含义。\n'
            "1. じまん：最基本的含义是自豪，也可以表示夸耀自己的成就或者财产。\n"
            "2. ほこり：最常见的含义是灰尘，也可以指骄傲，取决于上下文以及说话者所使用的语境和语气。\n"
            "现在，让我们来探讨一下为什么这两个词通常不直接表示积极或消极的含义，以及它们在日常对话中的用法。",
            ["not_japanese"],
        ),
        ("이 보고서는 3분기 매출 분석 결과를 요약한 것입니다.", ["not_japanese"]),
        ("```python\nimport os\nprint(os.environ)\n```", []),  # code only: no prose, no language
        ("このprojectのgoalはuserのexperienceをimproveすることです。", ["broken_language_mix"]),
        ("We need to 確認する the data before 提出します to the client.", ["broken_language_mix"]),
    ],
)
def test_language_violations_when_japanese_is_required(text: str, expected: list[str]) -> None:
    assert _types(text) == expected


def test_other_required_languages_give_wrong_language() -> None:
    assert _types("本日の会議では予算について議論しました。", "en") == ["wrong_language"]
    assert _types("Here is the report you asked for.", "zh") == ["wrong_language"]
    assert _types("本日の会議では予算について議論しました。", "zh") == ["wrong_language"]
    assert _types("Here is the report you asked for.", "ko") == ["wrong_language"]
    assert _types("Here is the report you asked for.", "en") == []
    assert _types("我们认为这个方案是目前最好的选择。", "zh") == []
    assert _types("이 보고서는 3분기 매출 분석 결과입니다.", "ko") == []


def test_language_details_never_quote_the_text() -> None:
    text = "本件の調査結果をまとめました。我们认为这个方案是目前最好的选择。"
    for _, detail in language_violations(text, "ja"):
        assert "我们" not in detail
        assert "調査" not in detail


def test_profile_counts_scripts_outside_code_and_quotes() -> None:
    found = profile("了解です。`print('hello world')` を実行し、結果を「Customer Success」に共有します。")
    assert found.primary == "ja"
    assert found.words == 0
    assert found.kana == 9
    assert found.han == 8


def test_mostly_quoted_text_is_judged_with_its_quotes() -> None:
    assert profile("1. 「次世代の太陽光発電：革新的な技術」").primary == "ja"


def test_hanzi_table_separates_chinese_only_from_japanese_characters() -> None:
    for char in "们这说请华结论户还进务处动时议谢帮题问":
        assert char in CHINESE_ONLY, char
    for char in "的了是在我参請這個為認売発済験":
        assert char not in CHINESE_ONLY, char
    for char in "參與們國學":
        assert char in RARE_IN_JAPANESE, char
    assert not CHINESE_ONLY & RARE_IN_JAPANESE


def test_hanzi_table_is_what_the_build_script_generates() -> None:
    from tests.modules import load_script

    module = load_script(Path(__file__).resolve().parents[2] / "scripts" / "build_hanzi_table.py")
    chinese_only, rare = module.build()
    assert frozenset(chinese_only) == CHINESE_ONLY
    assert frozenset(rare) == RARE_IN_JAPANESE


#: Cases whose label the written definitions (labels/DEFINITIONS.md of japanese-mt-bench) now decide
#: differently: a deliverable that is only code has no prose, hence no language to judge.
DEFINITION_CHANGES: dict[str, list[str]] = {"cd02": []}


def _lang_cases(shared_data: Path) -> list[dict[str, object]]:
    path = shared_data / "lang-cases" / "cases.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.mark.data
def test_lang_cases_all_labelled_as_expected(shared_data: Path) -> None:
    cases = _lang_cases(shared_data)
    assert len(cases) == 107
    wrong = []
    for case in cases:
        expected = case["expected"]
        assert isinstance(expected, dict)
        got = _types(str(case["text"]))
        labelled = expected["violations"]
        assert isinstance(labelled, list)
        if got != sorted(DEFINITION_CHANGES.get(str(case["id"]), labelled)):
            wrong.append((case["id"], expected["violations"], got))
    assert wrong == []


@pytest.mark.data
def test_lang_cases_primary_language_matches(shared_data: Path) -> None:
    mismatches: Counter[tuple[object, object, str]] = Counter()
    for case in _lang_cases(shared_data):
        expected = case["expected"]
        assert isinstance(expected, dict)
        primary = expected["primary"]
        if primary in ("mixed", "ja-Latn"):
            continue  # a mix has no single primary; romanised Japanese profiles as Latin text
        got = profile(str(case["text"])).primary
        if got != primary and not (got == "code" and primary == "none"):
            mismatches[(case["id"], primary, got)] += 1
    assert not mismatches


# --- prose, as the labels define it (japanese-mt-bench/labels/DEFINITIONS.md) ---------------------------


@pytest.mark.parametrize(
    "text",
    [
        '{\n"iPhone": 8.5,\n"Samsung Galaxy": 8.2,\n"Google Pixel": 8.0\n}',  # bare JSON, English keys
        '[{"score": 5, "title": "The Best", "description": "素晴らしい作品"}]',
        "2022-01,155.28,148.50\n2022-02,164.25,159.50\n2022-03,169.85,163.10",  # CSV
        "y = (3/4)x^3 - e^(2x) + sin(pi*x) - sqrt(7)",  # math
        "1. 文学\n2. 歴史\n3. 科学\n4. 芸術",  # a list of kanji-only Japanese words
        "おすすめは『The Legend of Zelda: Breath of the Wild』と The Last of Us です。",  # titles
        "Pride and Prejudice は名作で、Google Photos の For You 機能も便利です。",  # unquoted titles, products
        "コインを投げて heads が出る確率は 1/2 です。",  # a single English word
        "関数 sin(x) と cos(x) の値を、変数 x = 3.14 で計算します。",  # math inside Japanese
    ],
)
def test_code_data_math_titles_and_single_words_are_not_a_language_problem(text: str) -> None:
    assert _types(text) == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Japanese with English sentences or paragraphs is a mix, not not_japanese
        ("東京は日本の首都です。\nI'm sorry, but I don't have enough information to answer that question.",
         ["broken_language_mix"]),
        ("Sure, here is the answer you asked for.\n東京は日本の首都で、人口は約1400万人です。",
         ["broken_language_mix"]),
        # a switch of language in the middle of a sentence
        ("日本の現行 electoral system は小選挙区比例代表並立制です。", ["broken_language_mix"]),
        ("女性の労働力 participation rate は年々上昇しています。", ["broken_language_mix"]),
        ("The sentence 「昨日、友人と祭りへ行った。」は正しい日本語表現です。", ["broken_language_mix"]),
        # English with a Japanese paragraph has kana: a mix too
        ("Five documentaries are worth watching.\n1. Man on Wire (2008) is about a high-wire walk.\n"
         "5. 進路の交差点（2010年）：この映画は、高校卒業生の進路選択を捉えたドキュメンタリーです。",
         ["broken_language_mix"]),
        # no kana in the prose: not Japanese, whatever kanji or quoted words it has
        ("Japanese culture values 礼節 (respect), so courtesy matters in business meetings.", ["not_japanese"]),
        ("Here is how you say it: 「ありがとう」 means thank you.", ["not_japanese"]),
        # Japanese terms as headings of English paragraphs: still English prose
        ("Machine learning has three main types.\n1. **教師あり学習**: This type requires labeled data sets, "
         "where each example has been classified by a human.\n2. **教師なし学習**: In this type there is no "
         "labeled data, and the algorithm must discover patterns itself.", ["not_japanese"]),
        # ... but a Japanese clause (particles after kanji) before English paragraphs is a Japanese answer
        ("「in the morning」に関連した英語を日本語へ和訳す\n\nHow do I get a value from an object in a list? "
         "I have a list of objects which contains some properties. I want the ID of the one whose name "
         "is equal to a string.", ["broken_language_mix"]),
        # English prose that holds a formula is prose, not code
        ("The given function is f(x) = 4x^3 - 9x - 14. To find the value of f(2), we substitute x = 2.",
         ["not_japanese"]),
        ("Run the following command:\n```bash\npip install -r requirements.txt\n```", ["not_japanese"]),
        ("我们认为这个方案是目前最好的选择。", ["not_japanese"]),
    ],
)  # fmt: skip
def test_not_japanese_needs_no_kana_and_english_inside_japanese_is_a_mix(
    text: str, expected: list[str]
) -> None:
    assert _types(text) == expected


def test_english_the_question_asked_for_is_not_a_mix() -> None:
    from tallyspan import Contract, check

    answer = "英語ではこう言います。\nThank you very much for your help yesterday.\n丁寧な表現です。"
    contract = Contract(language="ja")
    assert check(answer, contract, prompt="「昨日は助けてくれてありがとう」を英語で言ってください。").ok
    assert check(answer, contract, prompt="感謝の気持ちの伝え方を教えてください。").violation_types == (
        "broken_language_mix",
    )


def test_other_required_languages_follow_the_same_prose_rules() -> None:
    assert _types("```python\nprint('hi')\n```", "en") == []
    assert _types("東京は日本の首都です。", "en") == ["wrong_language"]
    assert _types("东京是日本的首都。", "zh") == []
    assert _types("東京は日本の首都です。", "zh") == ["wrong_language"]
    assert _types("Tokyo is the capital of Japan.", "ko") == ["wrong_language"]


# --- the profile, field by field, independent of the shared data ------------------------------------
# (primary, kana, han, hangul, words, function_words, ordinary_words, chinese_clauses, chinese_chars,
#  english_sentences, switches, quoted_kana, japanese_sentences)


@pytest.mark.parametrize(
    ("text", "fields"),
    [
        ('今日は会議の資料を作成しました。', ('ja', 7, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, True)),
        ('これは the 問題です。', ('ja', 5, 2, 0, 1, 1, 0, 0, 0, 0, 0, 0, True)),
        ('これは the and 問題です。', ('ja', 5, 2, 0, 2, 2, 0, 0, 0, 0, 1, 0, True)),
        ('この件は apple、banana 問題です。', ('ja', 5, 3, 0, 2, 0, 2, 0, 0, 0, 0, 0, True)),
        ('この件は apple、banana、cherry 問題です。', ('ja', 5, 3, 0, 3, 0, 3, 0, 0, 0, 1, 0, True)),
        ('この件は electoral system の問題です。', ('ja', 6, 3, 0, 2, 0, 2, 0, 0, 0, 1, 0, True)),
        ('この件は The Last of Us の問題です。', ('ja', 6, 3, 0, 4, 3, 0, 0, 0, 0, 0, 0, True)),
        ('この件は I think の問題です。', ('ja', 6, 3, 0, 2, 1, 1, 0, 0, 0, 1, 0, True)),
        ('We fixed the bug today.', ('en', 0, 0, 0, 5, 2, 3, 0, 0, 1, 0, 0, False)),
        ('We fixed it.', ('en', 0, 0, 0, 3, 2, 1, 0, 0, 0, 0, 0, False)),
        ('資料です。\nWe fixed the bug today.\n', ('ja', 2, 2, 0, 5, 2, 3, 0, 0, 1, 0, 0, True)),
        ('a cat です。', ('ja', 2, 0, 0, 2, 1, 1, 0, 0, 0, 1, 0, True)),
        ('A社とB社とaとbです。', ('ja', 5, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, True)),  # labels, not articles
        ('これは a big 問題です。', ('ja', 5, 2, 0, 2, 1, 1, 0, 0, 0, 1, 0, True)),
        ('vs etc ok の問題です。', ('ja', 3, 2, 0, 3, 0, 0, 0, 0, 0, 0, 0, True)),
        ('mixi と mixi と mixi の話です。', ('ja', 5, 1, 0, 3, 0, 3, 0, 0, 0, 0, 0, True)),
        ('{"a": "日本語の値です"}', ('ja', 3, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, False)),
        ('{"key": "value"}', ('code', 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, False)),
        ('[1, 2, 3]', ('none', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, False)),
        ('```\ncode here with words\n```\n説明です。', ('ja', 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, True)),
        ('~~~\ncode\n~~~\n説明です。', ('ja', 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, True)),
        ('```\nunclosed code with many english words here\n', ('code', 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, False)),
        ('`inline code words` を使います。', ('ja', 4, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, True)),
        ('x = 1; y = 2\n説明です。', ('ja', 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, True)),
        # a comment is code, whatever it says (DEFINITIONS.md): its English is no sentence of the answer
        ('// comment with many english words\n説明です。', ('ja', 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, True)),
        ('/* block */\n説明です。', ('ja', 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, True)),
        ('#include <stdio.h>\n説明です。', ('ja', 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, True)),
        ('import os\n説明です。', ('ja', 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, True)),
        ('詳細は user@example.com へ。', ('ja', 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, True)),
        ('式 $x + y$ と \\alpha です。', ('ja', 3, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, True)),
        ('<|im_end|>回答です。', ('ja', 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, True)),
        ('「ありがとう」', ('ja', 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, False)),
        ('「ありがとうございました本当に」と言った。', ('ja', 3, 1, 0, 0, 0, 0, 0, 0, 0, 0, 12, True)),
        ('He said 「ありがとうございます、助かりました」 today.', ('ja', 0, 0, 0, 3, 1, 2, 0, 0, 0, 0, 15, False)),
        ('The word 「寿司」 is Japanese.', ('en', 0, 0, 0, 4, 2, 1, 0, 0, 1, 0, 0, False)),
        ('基準率の無視（base rate neglect）です。', ('ja', 3, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, True)),
        ('我们认为这个方案是目前最好的选择。', ('zh', 0, 16, 0, 0, 0, 0, 1, 16, 0, 0, 0, False)),
        ('第三四半期売上報告', ('ja', 0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, False)),
        ('이 보고서는 요약입니다.', ('ko', 0, 0, 10, 0, 0, 0, 0, 0, 0, 0, 0, False)),
        ('日本語の文です。이 보고서', ('ja', 3, 4, 4, 0, 0, 0, 0, 0, 0, 0, 0, True)),
        ('Hello 世界', ('ja', 0, 2, 0, 1, 0, 0, 0, 0, 0, 0, 0, False)),
        ('Hello world 日本', ('ja', 0, 2, 0, 2, 0, 1, 0, 0, 0, 0, 0, False)),
        ('12345', ('none', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, False)),
        ('🎉', ('none', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, False)),
        ('', ('none', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, False)),
        ('カタカナ', ('ja', 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, False)),
        ('ひらがな', ('ja', 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, False)),
        ('We need to 確認する the data.', ('ja', 2, 2, 0, 5, 4, 1, 0, 0, 0, 1, 0, False)),
        ("「ありがとう」 `x`", ("ja", 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, False)),  # only quotes beside code
        ("B社の rate and change の問題です。", ("ja", 4, 3, 0, 3, 1, 2, 0, 0, 0, 1, 0, True)),
        ("これは a cat と dog です。", ("ja", 6, 0, 0, 3, 1, 2, 0, 0, 0, 1, 0, True)),
        ("基準率の無視(base rate neglect)です。", ("ja", 3, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, True)),  # ASCII gloss
        ("我去。", ("zh", 0, 2, 0, 0, 0, 0, 1, 2, 0, 0, 0, False)),  # weak evidence is enough without kana
        ("式 $rate of change$ です。", ("ja", 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, True)),
        ("式 \\[rate of change\\] です。", ("ja", 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, True)),
        ('He said 「ありがとうございます、助かりました」 today. `x`', ('ja', 0, 0, 0, 3, 1, 2, 0, 0, 0, 0, 15, False)),
        ('{"k": "<|im_end|>"}', ('none', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, False)),
        ('{"a": "ありがとう"}', ('ja', 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, False)),
        ('{"a": "我们认为这个方案是目前最好的选择"}', ('zh', 0, 16, 0, 0, 0, 0, 1, 16, 0, 0, 0, False)),
        ('{"a": "日本한국"}', ('ko', 0, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, False)),
        ('詳細は https://example.com/guide を参照。', ('ja', 2, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, False)),
        ('詳細は www.example.com/guide を参照。', ('ja', 2, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, False)),
        ('式 $x$ です。', ('ja', 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, True)),
        ('式 \\alpha です。', ('ja', 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, True)),
        ('[注意] 説明です。', ('ja', 2, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, True)),
        ('[注意] X線の説明です。', ('ja', 3, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, True)),
        ('[注意] 1/2 の説明です。', ('ja', 3, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, True)),
        ('// note\n説明です。', ('ja', 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, True)),
        ('[注意] #1 の説明です。', ('ja', 3, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, True)),
        # Chinese prose that names a Japanese word is Chinese.
        ('我们认为这个方案是目前最好的选择「あ」', ('zh', 0, 16, 0, 0, 0, 0, 1, 16, 0, 0, 1, False)),
        ('We fixed the bug today.\nあいうえおかきくけこ', ('ja', 10, 0, 0, 5, 2, 3, 0, 0, 1, 0, 0, False)),
        ('We fixed the bug today.\nあいうえおかきくけ', ('en', 9, 0, 0, 5, 2, 3, 0, 0, 1, 0, 0, False)),
        ('We fixed the bug today. He said 「あいうえおかきくけこ」.', ('ja', 0, 0, 0, 7, 3, 4, 0, 0, 1, 0, 10, False)),
        ('We fixed the bug today. He said 「あいうえおかきくけ」.', ('en', 0, 0, 0, 7, 3, 4, 0, 0, 1, 0, 9, False)),
        ('日本한국', ('ko', 0, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, False)),
        ('We fixed the bug today.\nあいう漢字漢字漢字', ('en', 3, 6, 0, 5, 2, 3, 0, 0, 1, 0, 0, False)),
        ('"日本語の文です。"', ('ja', 3, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, True)),
        ('["日本語の文です。"]', ('ja', 3, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, False)),
        ('`x` `y`', ('none', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, False)),
        ('資料を送ります。我去。', ('ja', 4, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, True)),
        ('資料を。我去。', ('ja', 1, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, True)),
        ("[" * 70 + "日本語です。" + "]" * 70, ('ja', 2, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, True)),
        ('これは A cat の話です。', ('ja', 6, 1, 0, 2, 1, 1, 0, 0, 0, 1, 0, True)),
        ('答えは a です。', ('ja', 4, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, True)),
        ('これは a、cat です。', ('ja', 5, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, True)),
        ('これは a Cat です。', ('ja', 5, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, True)),
        ('資料です。\nWe fixed the bug', ('ja', 2, 2, 0, 4, 2, 2, 0, 0, 1, 0, 0, True)),
        ('資料です。\nWe fixed it!Now we go home today.', ('ja', 2, 2, 0, 8, 3, 4, 0, 0, 1, 0, 0, True)),
        ('Tokyo Osaka.\nWe fixed the bug today.', ('en', 0, 0, 0, 7, 2, 3, 0, 0, 1, 0, 0, False)),
        ('We fixed the bug today.\nWe shipped the new build.', ('en', 0, 0, 0, 10, 4, 6, 0, 0, 2, 0, 0, False)),
        ('これは the and 問題です。それは the and 問題です。', ('ja', 10, 4, 0, 4, 4, 0, 0, 0, 0, 2, 0, True)),
        ('この件は big ox の問題です。', ('ja', 6, 3, 0, 2, 0, 2, 0, 0, 0, 0, 0, True)),
    ],
)  # fmt: skip
def test_each_profile_counts_exactly(text: str, fields: tuple[object, ...]) -> None:
    found = profile(text)
    assert (
        found.primary, found.kana, found.han, found.hangul, found.words, found.function_words,
        found.ordinary_words, found.chinese_clauses, found.chinese_chars, found.english_sentences,
        found.switches, found.quoted_kana, found.japanese_sentences,
    ) == fields  # fmt: skip


@pytest.mark.parametrize(
    ("text", "required", "violations"),
    [
        ("我们认为这个方案是目前最好的选择。", "ja",
         [(ViolationType.NOT_JAPANESE, "primary language zh, not ja (0 kana, 16 han, 0 latin words)")]),
        ("第三四半期売上報告", "ja", []),  # kanji only, no Chinese evidence: Japanese
        ("本件の調査結果をまとめました。我们认为这个方案是目前最好的选择。", "ja",
         [(ViolationType.CHINESE_IN_JAPANESE, "1 Chinese clause(s), 16 han chars, in Japanese text")]),
        ("資料です。\nWe fixed the bug today.\n", "ja",
         [(ViolationType.BROKEN_LANGUAGE_MIX,
           "English inside Japanese (1 English sentence(s), 0 sentence(s) switching language)")]),
        ("これは the and 問題です。", "ja",
         [(ViolationType.BROKEN_LANGUAGE_MIX,
           "English inside Japanese (0 English sentence(s), 1 sentence(s) switching language)")]),
        ("日本語の文です。이 보고서", "ja",
         [(ViolationType.BROKEN_LANGUAGE_MIX, "Korean inside Japanese (4 hangul chars)")]),
        # more hangul than kana and kanji: Korean, yet a Japanese sentence is there, so it is judged a mix
        ("日本語の文です。이 보고서는 요약입니다", "ja",
         [(ViolationType.BROKEN_LANGUAGE_MIX, "Korean inside Japanese (10 hangul chars)")]),
        ("これは the and 問題です。이", "ja",
         [(ViolationType.BROKEN_LANGUAGE_MIX,
           "English inside Japanese (0 English sentence(s), 1 sentence(s) switching language)")]),
        ("We fixed the bug today.", "zh",
         [(ViolationType.WRONG_LANGUAGE, "primary language en, not zh (0 kana, 0 han, 5 latin words)")]),
        ("이 보고서는 요약입니다.", "zh",
         [(ViolationType.WRONG_LANGUAGE, "primary language ko, not zh (0 kana, 0 han, 0 latin words)")]),
        ("第三四半期売上報告", "zh", []),  # kanji only: could be either
        ("今日は会議の資料を作成しました。", "zh",
         [(ViolationType.WRONG_LANGUAGE, "primary language ja, not zh (7 kana, 8 han, 0 latin words)")]),
        ("We fixed the bug today.", "en", []),
        ("これは the and 問題です。", "en",
         [(ViolationType.BROKEN_LANGUAGE_MIX, "CJK text mixed with English (5 kana, 2 han, 2 latin words)")]),
        ("我们认为这个方案是目前最好的选择。\nWe fixed the bug today.\n", "en",
         [(ViolationType.BROKEN_LANGUAGE_MIX, "CJK text mixed with English (0 kana, 16 han, 5 latin words)")]),
        ("我们认为这个方案是目前最好的选择。", "en",
         [(ViolationType.WRONG_LANGUAGE, "primary language zh, not en (0 kana, 16 han, 0 latin words)")]),
        ("今日は会議の資料を作成しました。", "en",
         [(ViolationType.WRONG_LANGUAGE, "primary language ja, not en (7 kana, 8 han, 0 latin words)")]),
        ("이 보고서는 요약입니다.", "en",
         [(ViolationType.WRONG_LANGUAGE, "primary language ko, not en (0 kana, 0 han, 0 latin words)")]),
        ("이 보고서는 요약입니다.", "ko", []),
        ("今日は会議の資料を作成しました。", "ko",
         [(ViolationType.WRONG_LANGUAGE, "primary language ja, not ko (7 kana, 8 han, 0 latin words)")]),
        ("今日は会議の資料を作成しました。", "fr", []),  # not a language the rules know
        ("🎉", "en", []),
        ('{"key": "value"}', "ja", []),  # code only
    ],
)  # fmt: skip
def test_each_required_language_gives_its_exact_violations(
    text: str, required: str, violations: list[tuple[ViolationType, str]]
) -> None:
    assert language_violations(text, required) == violations


def test_english_the_prompt_asks_for_is_no_english_sentence_but_a_switch_still_is() -> None:
    mixed = "資料です。\nWe fixed the bug today.\n"
    assert language_violations(mixed, "ja", english_wanted=True) == []
    switched = "これは the and 問題です。"
    assert language_violations(switched, "ja", english_wanted=True) == [
        (ViolationType.BROKEN_LANGUAGE_MIX,
         "English inside Japanese (0 English sentence(s), 1 sentence(s) switching language)")
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("prompt", "wanted"),
    [
        (None, False),
        ("これを英語で書いてください。", True),
        ("英訳してください。", True),
        ("Answer in English, please.", True),
        ("Translate this into English.", True),
        ("Answer in Englishman style.", False),
        ("English please.", False),
        ("日本語で答えてください。", False),
    ],
)
def test_english_is_requested_by_the_prompts_own_words(prompt: str | None, wanted: bool) -> None:
    assert english_requested(prompt) is wanted


def test_english_requested_matches_the_plain_search() -> None:
    """The substring tests before the search never change its answer."""
    import random
    import re

    from tallyspan._engine._language import _ENGLISH_REQUEST

    rng = random.Random(11)
    pieces = ["英語で", "英訳", "英作文", "英", "in english", "INTO English", "In  English", "n", "N", "ñ", "日本語で",
              "要約して", " ", "て", "English", "in englishx", "ın english", "İn english"]  # fmt: skip
    prompts = ["".join(rng.choice(pieces) for _ in range(rng.randrange(6))) for _ in range(3000)]
    for prompt in prompts:
        assert english_requested(prompt) == (_ENGLISH_REQUEST.search(prompt) is not None), prompt
    # What the substring tests rely on: case-insensitively, n matches only n and N, and 英 only itself.
    for letter, expected in (("n", {"n", "N"}), ("英", {"英"})):
        pattern = re.compile(f"(?i){letter}")
        assert {chr(point) for point in range(0x110000) if pattern.fullmatch(chr(point))} == expected


def test_bare_programs_and_data_are_recognised_by_their_parsers_and_have_no_language() -> None:
    """No fences: the answer is a Python module, a JSON document cut at max_tokens, or JSON under a
    short label; none of them is English prose."""
    contract = Contract(language="ja")
    python = (
        "import os\n\ndef top_words(path):\n    with open(path) as f:\n        return f.read().split()[:5]\n"
    )
    truncated = (
        '{\n"a": {"country": "Denmark", "capital": "Copenhagen"},\n'
        '"b": {"country": "Argentina", "capital": "Bue'
    )
    labelled = 'JSON Object:\n{\n  "TechRadar": 9,\n  "CNET": 8\n}'
    for answer in (python, truncated, labelled):
        assert check(answer, contract).violation_types == (), answer
    # English prose is still English, even one that parses as a Python expression.
    prose = "The capital of Denmark is Copenhagen.\nIt is known for its vibrant art scene and design."
    assert check(prose, contract).violation_types == ("not_japanese",)


@pytest.mark.parametrize(
    ("prompt", "languages"),
    [
        ("「今日は晴れです」を英訳してください。", {"en"}),
        ("これを英語で書いてください。", {"en"}),
        ("Translate this into English.", {"en"}),
        ("次の英文を日本語に訳してください：It is sunny.", {"ja"}),
        ("英文メールで会議の日程変更をお願いする文面を書いてください。", {"en"}),  # an English text to write
        ("次の英文メールを日本語に訳してください：Dear John, thank you.", {"ja"}),  # one given to translate
        ("「今日は晴れです」を中国語に訳してください。", {"zh"}),
        ("韓国語で挨拶を書いてください。", {"ko"}),
        ("Please answer in Japanese.", {"ja"}),
        ("今日の天気を教えてください。", set()),
        (None, set()),
    ],
)
def test_the_languages_a_prompt_asks_for_are_read_from_its_own_words(
    prompt: str | None, languages: set[str]
) -> None:
    assert requested_languages(prompt) == languages


def test_every_language_type_follows_the_language_the_question_asks_for() -> None:
    japanese = Contract(language="ja")
    english = "The weather is fine today, so I will go for a walk in the park."
    assert (
        check(
            english, japanese, prompt="「今日は天気が良いので公園を散歩します」を英訳してください。"
        ).violation_types
        == ()
    )
    # English given as the text to translate is no request for English.
    assert check(
        english, japanese, prompt="次の英文を日本語に訳してください：The weather is fine."
    ).violation_types == ("not_japanese",)
    chinese = "今天天气很好，我们去公园散步吧。"
    assert (
        check(chinese, japanese, prompt="「今日は天気が良い」を中国語に訳してください。").violation_types
        == ()
    )
    assert (
        check("今日は天気が良いです。", Contract(language="en"), prompt="Answer in Japanese.").violation_types
        == ()
    )
    # The contract's own language asked for again changes nothing.
    mixed = "日本語で答えます。We fixed the bug today and shipped it.\n以上です。"
    assert check(mixed, japanese, prompt="日本語で答えてください。").violation_types == (
        "broken_language_mix",
    )


@pytest.mark.parametrize(
    "code",
    [
        "SELECT name, COUNT(*) AS orders\nFROM customers c\nJOIN orders o ON o.customer_id = c.id\n"
        "GROUP BY name\nORDER BY orders DESC\nLIMIT 5;",
        'public class Main {\n    public static void main(String[] args) {\n        System.out.println("Hello");\n'
        "    }\n}",
        "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)",
        '#include <iostream>\nint main() {\n    std::cout << "Enter a positive integer to calculate it."'
        " << std::endl;\n}",
        # a command line: options after a space, a file path
        "grep -c ERROR /var/log/app.log",
        "tar xzf backup.tar.gz -C ~/restore/data",
    ],
)
def test_unfenced_code_without_english_grammar_has_no_language(code: str) -> None:
    """Identifiers and keywords with no English function word and no sentence's end are no prose; the
    words inside string literals are quoted, not the answer's own."""
    assert check(code, Contract(language="ja")).violation_types == ()


@pytest.mark.parametrize(
    "text",
    [
        "OK",
        "Error: connection refused",
        "Du må være en ren og fornuftig ansatt.",
        "The weather is fine.",
        # a dash between words and a link are no command line
        "The capital is Tokyo - a well-known city",
        "Tokyo is the capital, see https://en.wikipedia.org/wiki/Tokyo for more",
    ],
)
def test_short_replies_and_prose_in_any_latin_language_are_still_not_japanese(text: str) -> None:
    assert check(text, Contract(language="ja")).violation_types == ("not_japanese",)


def test_a_json_deliverable_is_judged_by_its_cjk_strings_alone() -> None:
    """Kanji keys beside formula values: the keys are kanji-only Japanese, the formulas no prose."""
    answer = '{\n  "方程式1": "y = (3/4)*x^3 - e^(2x) + sin(pi*x)",\n  "方程式2": "E = m(c^2) + gamma*(v/d) to 5"\n}'
    assert check(answer, Contract(language="ja")).violation_types == ()
    chinese = '{"答案": "我们认为这个方案是可行的"}'
    assert check(chinese, Contract(language="ja")).violation_types == ("not_japanese",)


def test_titles_in_corner_brackets_and_html_tags_with_attributes_are_not_english_in_the_prose() -> None:
    title = "ハインラインの長編SFです。原題《The Moon is a Harsh Mistress》として知られています。"
    assert check(title, Contract(language="ja")).violation_types == ()
    page = (
        '以下に簡単なHTMLコードを示します：\n<!DOCTYPE html>\n<html lang="ja">\n <head>\n'
        '    <meta charset="UTF-8" />\n    <title>ジョークサイト</title>\n </head>\n <body>\n'
        '    <button onclick="showJoke()">ボタンを押してジョークを選択</button>\n </body>\n</html>'
    )
    assert check(page, Contract(language="ja")).violation_types == ()
    # English prose between the tags is still English inside Japanese.
    mixed = "説明します。<p>This paragraph explains the whole design in English words.</p>以上です。"
    assert check(mixed, Contract(language="ja")).violation_types == ("broken_language_mix",)


_JA = Contract(language="ja", min_chars=10)


@pytest.mark.parametrize(
    ("prompt", "answer", "expected"),
    [
        # English text the prompt gives, reworked: corrected, completed, quoted back, keeps its language
        (
            "次の英文の文法の誤りを直してください: He go to school every day.",
            "He goes to school every day.",
            (),
        ),
        (
            "次の英文の空欄を埋めてください: The quick brown fox ___ over the lazy dog.",
            "The quick brown fox jumps over the lazy dog.",
            (),
        ),
        # ... but an English prompt's English is no material: the contract's language holds
        (
            "Correct this sentence: He go to school every day.",
            "He goes to school every day.",
            ("not_japanese",),
        ),
        # ... nor is English that uses none of the given text's words
        (
            "次の英文を日本語で要約してください: The committee approved the new budget after a long debate.",
            "Sure! Here is my summary: lawmakers finally agreed on spending plans following lengthy arguments.",
            ("not_japanese",),
        ),
        # an English text asked for by what it is ("英語のことわざ"), not an explanation about English
        ("英語のことわざを一つ教えてください。", "Actions speak louder than words.", ()),
        (
            "英語の文法について、現在完了形の使い方を説明してください。",
            "The present perfect is used for actions that happened at an unspecified time before now.",
            ("not_japanese",),
        ),
    ],
)
def test_english_the_prompt_gave_or_asked_for_by_name_is_no_language_violation(
    prompt: str, answer: str, expected: tuple[str, ...]
) -> None:
    assert check(answer, _JA, prompt=prompt).violation_types == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # a three-word English sentence with a finite verb after Japanese work is a mix
        ("太郎くんは合計で11個のりんごを持っています。\n#### 11\nThe answer is: 11", ["broken_language_mix"]),
        ("猫の名前はタマです。\nThis is correct.", ["broken_language_mix"]),
        # headings and titles of three words have no finite verb
        ("使い方を説明します。\nHow it works\n設定を開いて保存します。", []),
        ("おすすめの本です。\nThe Art of War\n孫子の兵法書です。", []),
        # a list of Japanese words with a three-word English sentence stays Japanese: a mix, not English
        ("1. 立派 A. すばらしい\n2. 開拓 B. 知識\nThe answer is: 2.", ["broken_language_mix"]),
    ],
)
def test_a_three_word_english_sentence_with_a_verb_is_a_mix_and_no_more(
    text: str, expected: list[str]
) -> None:
    assert _types(text) == expected
