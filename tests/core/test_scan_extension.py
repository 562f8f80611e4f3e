"""The optional C module ``tallyspan._engine._scan`` agrees with the pure-Python scans it stands in for.

``tallyspan._engine._scripts`` runs the language checks' character scans in C where the module was built (the
build hook, hatch_build.py, compiles it when a compiler is there) and in pure Python where it was not
or ``TALLYSPAN_NO_EXTENSIONS`` is set. Both must give the same results on every input: the class
table against the regex classes for every BMP code point, each scan against its Python equivalent on
every storage kind of str, and the whole engine's verdicts on real and synthetic outputs in two
processes, one with the module and one without. A wrong argument is an exception, never a crash.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

from tallyspan._engine import _scripts
from tallyspan._engine._hanzi_table import CHINESE_ONLY, RARE_IN_JAPANESE
from tallyspan._engine._scripts import (
    _CLASS_BIGRAM_FIRST,
    _CLASS_BIGRAM_SECOND,
    _CLASS_DIGIT,
    _CLASS_HAN,
    _CLASS_HANGUL,
    _CLASS_HINT,
    _CLASS_KANA,
    _CLASS_LETTER,
    _FUNCTION_CHARS,
    ACCELERATED,
    HAN,
    KANA,
    MARKS,
    CharacterFinder,
    _bigram_firsts,
    _class_table,
    _hints,
    _next_hint,
    latin_bounds,
    python_latin_bounds,
    python_script_counts,
    script_counts,
)

needs_module = pytest.mark.skipif(
    not ACCELERATED, reason="the optional C module tallyspan._engine._scan is not built here"
)

_HANGUL = ((0x1100, 0x11FF), (0x3130, 0x318F), (0xAC00, 0xD7FF))
# Characters of every kind the scans tell apart, and of each storage kind of str (Latin-1, UCS-2, UCS-4).
_ALPHABET = (
    "aZ09 é.,\n"
    "かなカナｶﾅㇰ々ー・「」。、漢字日本語的了在是我你可以但所如一個"
    + "".join(sorted(CHINESE_ONLY)[:40])
    + "".join(sorted(RARE_IN_JAPANESE)[:20])
    + "한글ㄱ"
    + "𠀀😀"
    + "\ud800\udfff"
)


def _compiler_available() -> bool:
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    return shutil.which(compiler) is not None


def test_the_module_is_built_where_a_compiler_is() -> None:
    if os.environ.get("TALLYSPAN_NO_EXTENSIONS"):
        pytest.skip("TALLYSPAN_NO_EXTENSIONS is set: the pure-Python scans are in use")
    if not ACCELERATED and not _compiler_available():
        pytest.skip("no C compiler here: the pure-Python scans are in use")
    assert ACCELERATED, (
        "a C compiler is here but tallyspan._engine._scan is not built: reinstall (pip install -e .)"
    )


def test_the_class_table_holds_each_code_points_classes() -> None:
    table = _class_table()
    hint_class = _hints().pattern.split("](?:", 1)[0] + "]"  # the regex's leading character class
    hint = __import__("re").compile(hint_class)
    for point in range(0x10000):
        char = chr(point)
        bits = table[point]
        assert bool(bits & _CLASS_KANA) == bool(KANA.match(char)), hex(point)
        assert bool(bits & _CLASS_HAN) == bool(HAN.match(char)), hex(point)
        assert bool(bits & _CLASS_HANGUL) == any(first <= point <= last for first, last in _HANGUL), hex(
            point
        )
        assert bool(bits & (_CLASS_HINT | _CLASS_BIGRAM_FIRST)) == bool(hint.match(char)), hex(point)
        assert bool(bits & _CLASS_BIGRAM_FIRST) == (char in _bigram_firsts()), hex(point)
        assert bool(bits & _CLASS_BIGRAM_SECOND) == (char in "".join(_bigram_firsts().values())), hex(point)
        assert bool(bits & _CLASS_LETTER) == (char.isascii() and char.isalpha()), hex(point)
        assert bool(bits & _CLASS_DIGIT) == (char.isascii() and char.isdigit()), hex(point)


@needs_module
def test_every_code_point_is_counted_like_the_pure_python_counts() -> None:
    for point in [*range(0xD800), *range(0xE000, 0x10000), 0xD800, 0xDFFF, 0x10000, 0x20000, 0x10FFFF]:
        char = chr(point)
        assert script_counts(f"a{char}") == python_script_counts(f"a{char}"), hex(point)


@needs_module
def test_random_texts_of_each_storage_kind_count_alike() -> None:
    rng = random.Random(6)
    for size in (1, 2, 7, 64, 1000, 9000):
        for alphabet in ("aé\n", _ALPHABET[:60], _ALPHABET):
            text = "".join(rng.choices(alphabet, k=size))
            assert script_counts(text) == python_script_counts(text), (size, alphabet[:8])


def _python_find(text: str, bits: int, start: int | None, end: int | None, last: bool) -> int:
    table = _class_table()
    positions = range(len(text))[slice(start, end)]
    found = [index for index in positions if ord(text[index]) < 0x10000 and table[ord(text[index])] & bits]
    if not found:
        return -1
    return found[-1] if last else found[0]


@needs_module
def test_find_and_rfind_agree_with_a_python_scan_within_any_bounds() -> None:
    from tallyspan._engine import _scan

    rng = random.Random(13)
    table = _class_table()
    for _ in range(400):
        text = "".join(rng.choices(rng.choice(("aé 1", _ALPHABET[:60], _ALPHABET)), k=rng.randint(0, 40)))
        bits = rng.choice((_CLASS_KANA, _CLASS_HAN, _CLASS_HINT, _CLASS_LETTER | _CLASS_DIGIT, 0xFF))
        start = rng.choice((None, 0, 3, -5, -100, 100))
        end = rng.choice((None, 0, 5, -2, -100, 100))
        expected_first = _python_find(text, bits, start, end, last=False)
        expected_last = _python_find(text, bits, start, end, last=True)
        assert _scan.find_class(text, table, bits, start, end) == expected_first, (text, bits, start, end)
        assert _scan.rfind_class(text, table, bits, start, end) == expected_last, (text, bits, start, end)


def test_the_signs_of_chinese_are_found_where_the_regex_finds_them() -> None:
    rng = random.Random(21)
    firsts = "".join(_bigram_firsts())
    seconds = "".join("".join(_bigram_firsts().values()))
    alphabet = (
        firsts * 4
        + seconds * 4
        + _FUNCTION_CHARS
        + "的かなカナ漢字日本語。、\n a"
        + "".join(sorted(CHINESE_ONLY)[:10])
    )
    texts = ["", "可", "可以", "以可", "如有可以", "可a以", "一個", "一", *(f"{first}" for first in firsts)]
    texts += ["".join(rng.choices(alphabet, k=rng.randint(1, 60))) for _ in range(500)]
    for text in texts:
        expected = [match.start() for match in _hints().finditer(text)]
        found: list[int] = []
        position = _next_hint(text, 0)
        while position >= 0:
            found.append(position)
            position = _next_hint(text, position + 1)
        assert found == expected, text


def test_latin_bounds_agree_with_the_pure_python_view() -> None:
    rng = random.Random(34)
    texts = ["", "漢字", "a", "1", "漢a字1", "1a", "é", "𠀀a😀9", "ｆｕｌｌ"]
    texts += ["".join(rng.choices(_ALPHABET, k=rng.randint(0, 50))) for _ in range(300)]
    for text in texts:
        assert latin_bounds(text) == python_latin_bounds(text), text
    assert python_latin_bounds("漢a字1。") == (1, 3)
    assert python_latin_bounds("123") is None


class _Index:
    def __init__(self, value: int) -> None:
        self.value = value

    def __index__(self) -> int:
        return self.value


@needs_module
@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda scan, table: scan.class_counts(b"bytes", table), TypeError),
        (lambda scan, table: scan.class_counts("text", table[:-1]), ValueError),
        (lambda scan, table: scan.class_counts("text", bytearray(table)), ValueError),
        (lambda scan, table: scan.class_counts("text"), TypeError),
        (lambda scan, table: scan.find_class("text", table, 0), ValueError),
        (lambda scan, table: scan.find_class("text", table, 256), ValueError),
        (lambda scan, table: scan.find_class("text", table, "1"), TypeError),
        (lambda scan, table: scan.find_class("text", table, 1, "0"), TypeError),
        (lambda scan, table: scan.rfind_class("text", table, 1, 0, 10**30), OverflowError),
        (lambda scan, table: scan.rfind_class("text", table, 1, 0, 1, 2), TypeError),
        # An object that only converts to an int would run Python code (its __index__) mid-scan.
        (lambda scan, table: scan.find_class("text", table, _Index(1)), TypeError),
        (lambda scan, table: scan.find_class("text", table, 1, _Index(0)), TypeError),
        (lambda scan, table: scan.repeat_units("text", _Index(16), 4, 256, 4), TypeError),
        (lambda scan, table: scan.distinct_in_class("text", table), TypeError),
        (lambda scan, table: scan.find_sign("text", table, 8, 64), TypeError),
        (lambda scan, table: scan.find_sign("text", table, 8, 64, 0), ValueError),
        (lambda scan, table: scan.find_sign("text", table, 8, 64, 128, "0"), TypeError),
        (lambda scan, table: scan.find_sign("text", table, 8, 64, 128, _Index(0)), TypeError),
        (lambda scan, table: scan.distinct_in_class("text", table[:5], 1), ValueError),
        (lambda scan, table: scan.distinct_in_class("text", table, 0), ValueError),
        (lambda scan, table: scan.distinct_in_class(b"text", table, 1), TypeError),
    ],
)
def test_a_wrong_argument_is_an_exception(call: object, error: type[Exception]) -> None:
    from tallyspan._engine import _scan

    with pytest.raises(error):
        call(_scan, _class_table())  # type: ignore[operator]


@needs_module
def test_find_sign_agrees_with_a_python_scan_from_any_start() -> None:
    from tallyspan._engine import _scan

    rng = random.Random(8)
    table = _class_table()
    pieces = "".join(_bigram_firsts()) + "".join(_bigram_firsts().values()) + _ALPHABET

    def expected(text: str, start: int, mask: int, first: int, second: int) -> int:
        for index in range(len(text))[start:]:
            bits = table[ord(text[index])] if ord(text[index]) < 0x10000 else 0
            if bits & mask:
                return index
            following = text[index + 1 : index + 2]
            if bits & first and following and ord(following) < 0x10000 and table[ord(following)] & second:
                return index
        return -1

    for _ in range(600):
        text = "".join(rng.choices(pieces, k=rng.randint(0, 50)))
        start = rng.choice((0, 1, 5, -3, -100, 100))
        masks = rng.choice(
            ((_CLASS_HINT, _CLASS_BIGRAM_FIRST, _CLASS_BIGRAM_SECOND), (_CLASS_KANA, _CLASS_HAN, 0xFF))
        )
        assert _scan.find_sign(text, table, *masks, start) == expected(text, start, *masks), (
            text,
            start,
            masks,
        )
    assert _scan.find_sign("一個", table, _CLASS_HINT, _CLASS_BIGRAM_FIRST, _CLASS_BIGRAM_SECOND) == 0
    assert _scan.find_sign("一", table, _CLASS_HINT, _CLASS_BIGRAM_FIRST, _CLASS_BIGRAM_SECOND) == -1


@needs_module
def test_distinct_in_class_gives_each_character_of_the_class_once_in_order() -> None:
    from tallyspan._engine import _scan

    rng = random.Random(21)
    table = _class_table()
    for _ in range(400):
        text = "".join(rng.choices(rng.choice(("aé 1", _ALPHABET[:60], _ALPHABET)), k=rng.randint(0, 600)))
        bits = rng.choice((_CLASS_KANA, _CLASS_HAN, _CLASS_HINT, _CLASS_LETTER | _CLASS_DIGIT, 0xFF))
        expected = "".join(dict.fromkeys(c for c in text if ord(c) < 0x10000 and table[ord(c)] & bits))
        assert _scan.distinct_in_class(text, table, bits) == expected, (text[:40], bits)
    # More distinct characters than the first buffer holds (256): the result grows past it.
    every_han = "".join(chr(point) for point in range(0x4E00, 0x4E00 + 3000))
    assert _scan.distinct_in_class(every_han * 2, table, _CLASS_HAN) == every_han


@needs_module
def test_without_whitespace_is_the_join_of_the_split_for_every_code_point() -> None:
    from tallyspan._engine import _scan

    every = "".join(chr(point) for point in range(0x110000))  # lone surrogates included
    assert _scan.without_whitespace(every) == "".join(every.split())
    rng = random.Random(55)
    spaces = " \t\n\r\x0b\x0c\x1c\x85\xa0\u1680\u2000\u200a\u2028\u2029\u202f\u205f\u3000"
    for _ in range(500):
        text = "".join(
            rng.choices(rng.choice(("aé", _ALPHABET[:60], _ALPHABET)) + spaces, k=rng.randint(0, 80))
        )
        compact = _scan.without_whitespace(text)
        assert compact == "".join(text.split()), text
        # the narrowest width its characters need, as every str: a wide U+3000 alone must not widen it
        assert sys.getsizeof(compact) == sys.getsizeof("".join(text.split())), text
    text = "判定：合格"
    assert _scan.without_whitespace(text) is text  # nothing to take out: the text itself

    class Text(str):
        pass

    assert type(_scan.without_whitespace(Text("a b"))) is str
    assert type(_scan.without_whitespace(Text("ab"))) is str
    with pytest.raises(TypeError):
        _scan.without_whitespace(b"a b")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        _scan.without_whitespace("a", "b")  # type: ignore[call-arg]


@pytest.mark.parametrize("module", [True, False], ids=["C", "pure-python"])
def test_a_character_finder_answers_every_one_character_test_as_the_text_would(
    module: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if module and not ACCELERATED:
        pytest.skip("the optional C module tallyspan._engine._scan is not built here")
    if not module:
        monkeypatch.setattr(_scripts, "_scan", None)
    rng = random.Random(34)
    characters = "<[/`~「（。日用満ア"
    finder = CharacterFinder(characters, ranges=((0x30, 0x39),))
    tested = characters + "0123456789"
    digit = re.compile("[0-9]")
    for _ in range(300):
        text = "".join(rng.choices(_ALPHABET + "<[/`~（。用満0a9", k=rng.randint(0, 300)))
        found = finder(text)
        assert finder(text) is found  # the same text again: remembered
        for char in tested[: len(characters) + 10]:
            assert (char in found) == (char in text), (text[:40], char)
        if module:  # each character of the set that the text holds, once: a short str to test in
            assert found == "".join(
                dict.fromkeys(c for c in text if c in characters or (c.isdigit() and c.isascii()))
            )
        holds_digit = digit.search(text) is not None
        # Never False where the text holds one; with the module exactly whether it does.
        assert finder.may_hold(text, digit) is (holds_digit or not module), text[:40]
    marks = "".join(chr(point) for point in range(0x80)) + "「」『』（）。、“”＃％\u3000"
    for text in ("判定：合格 <br>", "今週の報告です。「完了」（済）", "plain ascii {x: 1} // c"):
        for mark in marks:
            assert (mark in MARKS(text)) == (mark in text), (text, mark)
    with pytest.raises(ValueError, match="BMP"):
        CharacterFinder("😀")


def test_characters_added_to_a_finder_are_found_from_then_on() -> None:
    finder = CharacterFinder("<")
    text = "日本語の<報告>"
    assert "<" in finder(text)
    finder.add("本")
    assert "本" in finder(text)  # the remembered answer for this text was dropped with the addition
    assert "語" not in finder(text) or not ACCELERATED


@needs_module
def test_the_repetition_probes_find_the_units_the_pure_python_probes_find() -> None:
    from tallyspan._engine._repetition import _candidate_units, python_candidate_units

    rng = random.Random(89)
    pieces = ["ab", "abc", "今週", "問題ありません。", "x" * 7, "漢字", "ｶﾅ", "😀", "\n", " ", "é"]
    texts = ["", "a", "abcd" * 3, "ありがとう" * 60, "😀" * 50, "aé" * 40, "\ud800x" * 30]
    for _ in range(400):
        unit = "".join(rng.choices(pieces, k=rng.randint(1, 6)))
        loop = unit * rng.randint(1, 40)
        noise = "".join(rng.choices("aé漢字かなカナ😀 。\n", k=rng.randint(0, 300)))
        cut = rng.randint(0, len(noise))
        texts.append(noise[:cut] + loop + noise[cut:])
        texts.append("".join(rng.choices(pieces, k=rng.randint(0, 200))))
    for text in texts:
        assert _candidate_units(text) == python_candidate_units(text), text[:80]


@needs_module
@pytest.mark.parametrize(
    "arguments",
    [
        (b"text", 16, 4, 256, 4),
        ("text", 0, 4, 256, 4),
        ("text", 16, 4, 10**6, 4),
        ("text", 16, 4, 256),
        ("text", "16", 4, 256, 4),
    ],
)
def test_wrong_repetition_probe_arguments_are_an_exception(arguments: tuple[object, ...]) -> None:
    from tallyspan._engine import _scan

    with pytest.raises((TypeError, ValueError)):
        _scan.repeat_units(*arguments)  # type: ignore[arg-type]


_VERDICTS = textwrap.dedent(
    """
    import json, sys
    from tallyspan._engine import _scripts
    from tallyspan._engine._checks import check
    from tallyspan._contract._contracts import Contract
    from tallyspan._engine._language import profile
    contracts = [Contract.model_validate({"language": language}) for language in ("ja", "zh", "en", "ko")]
    out = {"accelerated": _scripts.ACCELERATED, "results": []}
    for text in json.load(sys.stdin):
        out["results"].append(
            [repr(profile(text))] + [[v.type.value for v in check(text, c).violations] for c in contracts]
        )
    print(json.dumps(out))
    """
)


def _verdicts(texts: list[str], *, without_module: bool) -> dict[str, object]:
    env = {key: value for key, value in os.environ.items() if key != "TALLYSPAN_NO_EXTENSIONS"}
    if without_module:
        env["TALLYSPAN_NO_EXTENSIONS"] = "1"
    done = subprocess.run(
        [sys.executable, "-c", _VERDICTS],
        input=json.dumps(texts),
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    result: dict[str, object] = json.loads(done.stdout)
    return result


def _assert_same_verdicts(texts: list[str]) -> None:
    with_module = _verdicts(texts, without_module=False)
    without = _verdicts(texts, without_module=True)
    assert without["accelerated"] is False
    assert with_module["accelerated"] is ACCELERATED
    for text, one, other in zip(texts, with_module["results"], without["results"], strict=True):  # type: ignore[call-overload]
        assert one == other, text[:200]


@needs_module
def test_the_engine_gives_the_same_verdicts_with_and_without_the_module_on_synthetic_outputs() -> None:
    rng = random.Random(55)
    pieces = [
        "これは日本語の文章です。",
        "我们可以使用这个方法。",
        "This is an English sentence with the words.",
        "한국어 문장입니다.",
        "「引用された日本語」と書いた。",
        "可以但是所以如果",
        "`code` and ```\nfenced code\n```",
        "価格は1,000円（税込）です。",
        "𠀀😀",
        "\n",
    ]
    texts = ["".join(rng.choices(pieces, k=rng.randint(1, 12))) for _ in range(300)]
    _assert_same_verdicts(texts)


@needs_module
@pytest.mark.data
@pytest.mark.slow  # every real output of the shared data, twice; the synthetic test above runs by default
def test_the_engine_gives_the_same_verdicts_with_and_without_the_module_on_real_outputs(
    shared_data: Path,
) -> None:
    texts: list[str] = []
    for path in sorted((shared_data / "japanese-mt-bench" / "model_answer").glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            for choice in json.loads(line).get("choices", []):
                texts.extend(turn for turn in choice.get("turns", []) if isinstance(turn, str))
    for line in (shared_data / "lang-cases" / "cases.jsonl").read_text(encoding="utf-8").splitlines():
        case = json.loads(line)
        texts.extend(value for value in case.values() if isinstance(value, str))
    assert len(texts) > 1000
    _assert_same_verdicts(texts)


def test_the_module_can_be_turned_off() -> None:
    code = "from tallyspan._engine import _scripts; print(_scripts.ACCELERATED)"
    env = {**os.environ, "TALLYSPAN_NO_EXTENSIONS": "1"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert done.stdout.strip() == "False"
    assert _scripts.ACCELERATED is ("tallyspan._engine._scan" in sys.modules)
