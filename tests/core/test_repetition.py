"""degenerate_repetition: output that loops, by hand; positives and hard negatives in ja, en and zh."""

from __future__ import annotations

import time

import pytest

from tallyspan import Contract, check
from tallyspan._contract._contracts import DEFAULT_MAX_REPEATED_SHARE
from tallyspan._engine._repetition import _common_prefix, _primitive, repeated_share

ANSWER = "日本の三大都市圏は人口が集中し、経済の中心になっています。交通網も整備されています。"


def _types(text: str, contract: Contract | None = None) -> tuple[str, ...]:
    result = check(text, contract)
    assert result.check_errors == ()  # a rule that raised found nothing: the verdict would be hollow
    return result.violation_types


@pytest.mark.parametrize(
    "text",
    [
        ANSWER + "<|im_end|>\n" + "<|im_start|>\n" * 40,  # a template token until the token limit
        "よろしくお願いします。" * 30,  # a phrase
        ANSWER + "\n" + "#" * 300,  # one character
        "The answer is yes. " + "I will check the data again and report. " * 20,
        "我们认为这个方案很好。" + "这是一个很好的问题。" * 20,
        "回答：\n```python\n" + "import numpy as np\n" * 40,  # a loop inside a block the model never closed
        ANSWER
        + "息子も喜んでいます。娘も喜んでいます。" * 12
        + "息子も喜",  # a two-part unit, cut off mid-unit
    ],
)
def test_loops_are_degenerate_repetition(text: str) -> None:
    assert "degenerate_repetition" in _types(text)


@pytest.mark.parametrize(
    "text",
    [
        # code that repeats lines on purpose, in a closed block
        "三回表示するコードです。\n```python\nprint('ho')\nprint('ho')\nprint('ho')\nprint('ho')\nprint('ho')\n"
        "print('ho')\nprint('ho')\nprint('ho')\n```\n",
        # a list of similar items
        "- りんご：100円\n- みかん：80円\n- ぶどう：300円\n- もも：250円\n- なし：120円\n",
        # a table with separator rows and repeated cells
        "| 曜日 | 午前 | 午後 |\n|---|---|---|\n| 月 | ○ | ○ |\n| 火 | ○ | × |\n| 水 | × | ○ |\n| 木 | ○ | ○ |\n",
        # a poem with a refrain
        "春が来た　春が来た\nどこに来た\n山に来た　里に来た\n野にも来た\n花が咲く　花が咲く\nどこに咲く\n",
        "Row, row, row your boat,\nGently down the stream.\nMerrily, merrily, merrily, merrily,\nLife is but a dream.",
        "我们的目标：提高质量，降低成本，扩大市场。谢谢！谢谢！",
        "すごい！！！！！ありがとうございます。",  # emphasis, not a loop
        ANSWER * 2,  # an echo (two copies) is not a loop
    ],
)
def test_lists_tables_poems_and_code_are_not_loops(text: str) -> None:
    assert "degenerate_repetition" not in _types(text)


def test_the_threshold_is_more_than_half_by_default_and_settable_per_contract() -> None:
    assert DEFAULT_MAX_REPEATED_SHARE == 0.5
    text = ANSWER + "もう一度確認します。" * 8  # about two thirds one unit
    share, unit = repeated_share(text)
    assert 0.5 < share < 0.8
    assert unit == len("もう一度確認します。")
    assert "degenerate_repetition" in _types(text)
    assert "degenerate_repetition" not in _types(text, Contract(max_repeated_share=0.9))
    assert "degenerate_repetition" not in _types(text, Contract(max_repeated_share=None))


def test_the_detail_says_how_much_loops_without_quoting_it() -> None:
    result = check(ANSWER + "秘密の合言葉。" * 40)
    detail = next(v.detail for v in result.violations if v.type.value == "degenerate_repetition")
    assert "秘密" not in detail
    assert "% of the output is one 7-char unit repeated back to back > max_repeated_share 0.5" in detail


def test_the_measure_is_linear_in_the_text() -> None:
    """Ten times the text costs about ten times as much, never a hundred (no quadratic scan)."""
    paragraph = "経済指標と金融政策の関係について説明します。" + "".join(
        chr(0x4E00 + i * 7) for i in range(60)
    )

    def cost(repeat: int) -> float:
        text = "".join(paragraph[i:] + paragraph[:i] for i in range(repeat))  # no unit repeats back to back
        best = float("inf")
        for _ in range(3):
            # This thread's CPU time, the best of three: other processes on a busy runner do not add to it.
            start = time.thread_time()
            for _ in range(5):
                repeated_share(text)
            best = min(best, time.thread_time() - start)
        return best

    small, large = cost(20), cost(200)
    assert large < 40 * small + 0.01
    start = time.thread_time()
    assert repeated_share("#" * 100_000 + ANSWER)[0] > 0.99
    assert repeated_share("ab" * 50_000)[0] == 1.0
    assert time.thread_time() - start < 1.0


# --- the measure, exactly ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "measure"),
    [
        ("", (0.0, 0)),
        ("a" * 19, (0.0, 0)),  # shorter than a run can be
        ("a" * 20, (1.0, 1)),
        ("ab" * 10, (1.0, 2)),  # the shortest unit that repeats, not "abab"
        ("x" + "ab" * 10, (20 / 21, 2)),
        ("ab" * 9 + "cdefghijklmnopqrstuv", (0.0, 0)),  # a run of 18 characters is emphasis
        ("abcdefghij" * 2, (0.0, 0)),  # two copies are an echo
        ("abcdefghij" * 3, (1.0, 10)),
        ("abc" * 10 + "ab", (1.0, 3)),  # cut off mid-unit: counted whole
        ("c" + "abc" * 10, (1.0, 3)),  # entered mid-unit: counted whole
        ("abc" * 100, (1.0, 3)),
        ("ab" * 15 + "cde" * 5, (30 / 45, 2)),  # the larger of two runs
        ("q" * 20 + "xyz" * 20, (60 / 80, 3)),
        ("ab" * 10 + "-" + "ab" * 10, (40 / 41, 2)),  # two runs of one unit add up
        ("ab" * 10 + "-" + "ab" * 15, (50 / 51, 2)),  # each run from its start
        ("x\n```\n" + "0 " * 50 + "\n```\n", (0.0, 0)),  # a closed code block is the deliverable
        ("x\n~~~\n" + "0 " * 50 + "\n~~~\n", (0.0, 0)),
        ("x\n```\n" + "0 " * 50, (99 / 105, 2)),  # an unclosed one is how a loop in code ends
        # whitespace padding at the ends is not part of the text, and whitespace is no phrase
        ("これが答えです。" + "\n" * 500, (0.0, 0)),
        ("\n" * 300 + "これが答えです。" + " " * 300, (0.0, 0)),
        ("ab" * 10 + "\n" * 100, (1.0, 2)),
        ("答え\n" + "\n \n" * 30 + "です", (0.0, 0)),
    ],
)
def test_the_repeated_share_and_unit_exactly(text: str, measure: tuple[float, int]) -> None:
    assert repeated_share(text) == measure


def test_a_unit_whose_words_recur_inside_it_is_found_on_a_later_try() -> None:
    """Each probe's characters first recur half a unit on (no repeat there), then a whole unit on."""
    half = "".join(chr(0x4E00 + 7 * index) for index in range(100))
    unit = half + half[:-1] + "終"
    assert repeated_share(unit * 5) == (1.0, 200)


def test_a_loop_in_the_last_third_of_the_text_is_found() -> None:
    prose = "".join(chr(0x4E00 + index * 3) for index in range(700))  # no unit repeats in it
    assert repeated_share(prose + "ab" * 150) == (0.3, 2)
    prose = "".join(chr(0x4E00 + index * 3) for index in range(960))
    assert repeated_share(prose + "ab" * 20) == (0.04, 2)  # only the last probe lands in it


@pytest.mark.parametrize("size", [150, 256])
def test_units_up_to_the_longest_are_found(size: int) -> None:
    unit = "".join(chr(0x4E00 + index) for index in range(size))
    assert repeated_share(unit * 5) == (1.0, size)


def test_a_unit_longer_than_the_longest_is_not_looked_for() -> None:
    unit = "".join(chr(0x4E00 + index) for index in range(300))
    assert repeated_share(unit * 5) == (0.0, 0)


def test_the_helpers() -> None:
    assert (_primitive("abab"), _primitive("abc"), _primitive("aaaa")) == ("ab", "abc", "a")
    assert [_common_prefix(*pair) for pair in [("abcd", "abxd"), ("", "a"), ("abc", "abc"), ("abc", "xbc")]] == [
        2, 0, 3, 0
    ]  # fmt: skip
    assert _common_prefix("abcdefgh", "abcdefgX") == 7
    assert _common_prefix("abcdefgh", "abcXefgh") == 3


def test_a_unit_longer_than_the_longest_is_not_looked_for_even_past_a_near_recurrence() -> None:
    """The first probe's characters recur 100 characters on (no repeat there): the next try stays within
    one unit's reach too, and never reaches the copy a whole 300-character unit on."""
    chars = [chr(0x4E00 + index) for index in range(300)]
    probe = 1500 // 32  # the first probe of a 1,500-character text
    chars[probe + 100 : probe + 104] = chars[probe : probe + 4]
    assert repeated_share("".join(chars) * 5) == (0.0, 0)


def test_a_run_of_one_character_is_found_by_a_probe_five_characters_before_its_end() -> None:
    """In 320 characters the probes are 20 apart: only the one at 310 lands in the run (295 to 315)."""
    prose = "".join(chr(0x4E00 + index * 3) for index in range(300))  # no unit repeats in it
    assert repeated_share(prose[:295] + "a" * 20 + prose[295:]) == (20 / 320, 1)


def test_closed_code_blocks_back_to_back_are_far_from_a_loop() -> None:
    """Each closed block leaves one character in its place: ten of them are a sixth of the text at most."""
    share, _ = repeated_share("```\nrow\n```\n" * 10)
    assert share <= 20 / 120


def test_the_longest_loop_wins_over_short_runs_whatever_order_the_candidates_come_in() -> None:
    """Twelve short runs (20 characters each, one per probe) and one loop of a 20-character unit (160):
    a short run measured first must not make the loop look unable to beat it, nor stop the search.
    The candidates are a set, so which comes first varies from run to run; most orders put runs first."""
    prose = iter(chr(0x4E00 + index) for index in range(1000))  # no unit repeats in it

    def take(count: int) -> str:
        return "".join(next(prose) for _ in range(count))

    segments = [take(10) + take(2) * 10 + take(10) for _ in range(12)]  # a probe lands in each short run
    text = "".join(segments) + take(20) * 8
    assert repeated_share(text) == (0.25, 20)


_LOOP_WITH_RAGGED_ENDS = (
    "かすしかそきこしこさきかくきしかししけきしかこさく"
    + "い>\nあ<いcうい>\n" * 13
    + "い>\nつつつとちちつたちちてつ"
    + "あ<いcうい>\n" * 9
    + "とてちてつてとてたちてたちとつつ"
    + "あ<いcうい>\n" * 8
    + "とてちつとたつつとつちちてちちとちつとつ"
)


@pytest.mark.parametrize(("text", "covered"), [(_LOOP_WITH_RAGGED_ENDS, 146)])
def test_every_candidate_unit_is_measured_in_a_fixed_order(text: str, covered: int) -> None:
    """A run's ends hold part of a unit, which ``str.count`` does not see: a bound from the count once
    skipped the best unit when another came first, and the candidates' order follows the hash seed
    (4 seeds in 6 gave 136 characters here)."""
    from tallyspan._engine._repetition import _candidate_units, _covered

    assert max(_covered(text, unit) for unit in _candidate_units(text)) == covered
    share, _ = repeated_share(text)
    assert round(share * len(text)) == covered


def test_a_unit_whose_probe_characters_recur_one_character_apart_is_found_on_the_next_try() -> None:
    """Every probe lands at the start of "aaaaba" (192 = 32 units): "aaaa" recurs 5 on (no repeat there),
    then 6 on (the unit), 11, 12, 17 ... The next try looks from one character on, and at the nearest."""
    assert repeated_share("aaaaba" * 32) == (1.0, 6)
