"""Script counts and Chinese evidence, checked against slow references written from the Unicode blocks.

The byte tables, the masks and the character classes are built once at import (or cached), so these tests
call the builders themselves: a test that only goes through ``script_counts`` or ``chinese_evidence``
checks the tables import built, never a changed builder.
"""

from __future__ import annotations

import random
import re
import unicodedata
from collections.abc import Callable

import pytest

from tallyspan._engine._hanzi_table import CHINESE_ONLY, RARE_IN_JAPANESE
from tallyspan._engine._scripts import (
    _CHUNK_UNITS,
    _CLAUSE_REACH,
    _HAN_MASK,
    _HANGUL_MASK,
    _KANA_MASK,
    ACCELERATED,
    HAN,
    KANA,
    ChineseEvidence,
    ScriptCounts,
    _character_class,
    _clause_around,
    _mask,
    _score,
    _tables,
    chinese_evidence,
    python_script_counts,
    script_counts,
)

Counter = Callable[[str], ScriptCounts]


@pytest.fixture(params=["c", "python"])
def counts(request: pytest.FixtureRequest) -> Counter:
    """Each implementation of the script counts: the C module's (where built) and the pure-Python one."""
    if request.param == "c":
        if not ACCELERATED:
            pytest.skip("the optional C module tallyspan._engine._scan is not built here")
        return script_counts
    return python_script_counts


# --- the reference: one character at a time, from the Unicode blocks --------------------------------

# Han: CJK Unified Ideographs Extension A, CJK Unified Ideographs, CJK Compatibility Ideographs (the BMP).
_HAN_BLOCKS = ((0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF))
# Hangul: Hangul Jamo, Hangul Compatibility Jamo, Hangul Syllables, Hangul Jamo Extended-B.
_HANGUL_BLOCKS = ((0x1100, 0x11FF), (0x3130, 0x318F), (0xAC00, 0xD7AF), (0xD7B0, 0xD7FF))


def _in(point: int, blocks: tuple[tuple[int, int], ...]) -> bool:
    return any(first <= point <= last for first, last in blocks)


def _is_katakana(point: int) -> bool:
    """Full-width katakana: the Katakana block's letters and iteration marks (not ゠, ・ or ー)."""
    if not 0x30A0 <= point <= 0x30FF:
        return False
    name = unicodedata.name(chr(point))
    return name.startswith(("KATAKANA LETTER", "KATAKANA DIGRAPH")) or "ITERATION MARK" in name


def _is_kana(point: int) -> bool:
    """Hiragana (the block but for its unassigned first point), full-width katakana, the katakana phonetic
    extensions, the half-width katakana letters and ｰ (not the half-width ・ or voiced sound marks), 々 and 〆."""
    if 0x3041 <= point <= 0x309F or 0x31F0 <= point <= 0x31FF or _is_katakana(point):
        return True
    if 0xFF61 <= point <= 0xFF9F:
        name = unicodedata.name(chr(point))
        return name.startswith("HALFWIDTH KATAKANA LETTER") or "PROLONGED" in name
    return chr(point) in "々〆"


def _reference(point: int) -> ScriptCounts:
    return ScriptCounts(
        kana=int(_is_kana(point)),
        han=int(_in(point, _HAN_BLOCKS)),
        hangul=int(_in(point, _HANGUL_BLOCKS)),
    )


def _reference_counts(text: str) -> ScriptCounts:
    counts = [_reference(ord(char)) for char in text]
    return (
        ScriptCounts(*(sum(column) for column in zip(*counts, strict=True)))
        if counts
        else ScriptCounts(0, 0, 0)
    )


def _bmp_characters() -> list[int]:
    return [point for point in range(0x10000) if not 0xD800 <= point <= 0xDFFF]


# Each script's first and last code point, and their neighbours outside it.
_BOUNDARIES = sorted(
    {
        point + offset
        for first, last in (
            *_HAN_BLOCKS,
            *_HANGUL_BLOCKS,
            (0x3041, 0x309F),
            (0x30A1, 0x30FA),
            (0x30FD, 0x30FF),
            (0x31F0, 0x31FF),
            (0xFF66, 0xFF9D),
            (0x3005, 0x3006),
        )
        for point in (first, last)
        for offset in (-1, 0, 1)
    }
    - set(range(0xD800, 0xE000))
)


def test_the_documented_kana_and_han_patterns_are_the_unicode_blocks() -> None:
    for point in _bmp_characters():
        char = chr(point)
        assert bool(KANA.match(char)) == _is_kana(point), hex(point)
        assert bool(HAN.match(char)) == _in(point, _HAN_BLOCKS), hex(point)


def test_the_byte_tables_classify_every_code_unit_like_the_unicode_blocks() -> None:
    high, low = _tables()
    assert len(high) == len(low) == 256
    # The masks repeat one byte: the bits of the rules that make up the script.
    kana, han, hangul = (mask & 0xFF for mask in (_KANA_MASK, _HAN_MASK, _HANGUL_MASK))
    for unit in range(0x10000):
        both = high[unit >> 8] & low[unit & 0xFF]
        assert both & (both - 1) == 0, f"{unit:#06x} matches more than one rule"
        found = ScriptCounts(
            int(bool(both & kana)),
            int(bool(both & han)),
            int(bool(both & hangul)),
        )
        expected = _reference(unit) if not 0xD800 <= unit <= 0xDFFF else ScriptCounts(0, 0, 0)
        assert found == expected, f"{unit:#06x}"


@pytest.mark.parametrize("bits", [0, 1, 0x05, 0x80, 0xFF, 0b1010_0110])
def test_a_mask_is_the_given_byte_in_every_one_of_a_chunks_code_units(bits: int) -> None:
    mask = _mask(bits)
    assert mask.to_bytes(_CHUNK_UNITS, "big") == bytes([bits]) * _CHUNK_UNITS
    assert mask.bit_count() == _CHUNK_UNITS * bin(bits).count("1")


def test_each_script_boundary_code_point_is_counted_like_the_reference(counts: Counter) -> None:
    for point in _BOUNDARIES:
        assert counts(chr(point)) == _reference(point), hex(point)
        # Among other characters, and in ASCII text (the fast path skips only all-ASCII text).
        assert counts(f"a{chr(point)}é") == _reference(point), hex(point)


def test_every_bmp_character_is_counted_like_the_reference(counts: Counter) -> None:
    text = "".join(map(chr, _bmp_characters()))
    expected = _reference_counts(text)
    # The block sizes: 95 + 93 + 16 + 56 + 2 kana; 6592 + 20992 + 512 han; 256 + 96 + 11184 + 80 hangul.
    assert expected == ScriptCounts(kana=262, han=28096, hangul=11616)
    assert counts(text) == expected


def test_ascii_text_counts_nothing(counts: Counter) -> None:
    assert counts("") == ScriptCounts(0, 0, 0)
    assert counts("plain ASCII text, 123") == ScriptCounts(0, 0, 0)


def test_every_kind_of_kana_is_counted(counts: Counter) -> None:
    # Hiragana 3, full-width katakana 5 (ー and ・ are not letters), half-width katakana 2, phonetic extension 1.
    assert counts("これはテスト・データーｶﾅㇰ漢字한") == ScriptCounts(kana=3 + 5 + 2 + 1, han=2, hangul=1)


def test_astral_han_and_lone_surrogates_count_nothing_and_do_not_break_the_count(counts: Counter) -> None:
    # Han outside the BMP (𠀀, Extension B) is two surrogate code units: neither is a script character,
    # like the HAN pattern, which matches none of it.
    assert counts("𠀀𪜀") == ScriptCounts(0, 0, 0)
    assert not HAN.search("𠀀𪜀")
    assert counts("漢𠀀カ") == ScriptCounts(kana=1, han=1, hangul=0)
    # A lone surrogate (JSON escapes can decode to one) is counted around, not an error.
    assert counts("\ud800漢カ\udfff한") == ScriptCounts(kana=1, han=1, hangul=1)


@pytest.mark.parametrize("length", [_CHUNK_UNITS - 1, _CHUNK_UNITS, _CHUNK_UNITS + 1, 3 * _CHUNK_UNITS + 7])
def test_texts_longer_than_a_chunk_count_every_chunk(length: int, counts: Counter) -> None:
    rng = random.Random(length)
    alphabet = "aé漢字カナかな한글ー・𠀀"
    text = "".join(rng.choices(alphabet, k=length))
    assert counts(text) == _reference_counts(text)
    # A script character on each side of every chunk boundary (a surrogate pair straddles one, too).
    marked = list("é" * length)
    for index in range(0, length, _CHUNK_UNITS):
        marked[index] = "カ"
        marked[max(index - 1, 0)] = "漢"
    marked[-1] = "한"
    text = "".join(marked)
    assert counts(text) == _reference_counts(text)


def test_random_bmp_texts_count_like_the_reference(counts: Counter) -> None:
    rng = random.Random(20261203)
    points = _bmp_characters()
    for _ in range(30):
        text = "".join(chr(rng.choice(points)) for _ in range(rng.randint(1, 2 * _CHUNK_UNITS + 50)))
        assert counts(text) == _reference_counts(text)


# --- character classes ------------------------------------------------------------------------------


def _class_matches(chars: set[str], universe: set[str]) -> set[str]:
    pattern = re.compile(_character_class(chars))
    return {char for char in universe if pattern.fullmatch(char)}


def test_a_character_class_matches_exactly_its_characters() -> None:
    rng = random.Random(14)
    for _ in range(200):
        base = rng.choice([0x20, 0x4E00, 0x3040])
        chars = {chr(base + rng.randrange(96)) for _ in range(rng.randint(1, 40))}
        universe = {chr(base + offset) for offset in range(-2, 100)} | set("Xx[]-^\\|")
        assert _class_matches(chars, universe) == chars, sorted(chars)


@pytest.mark.parametrize(
    "chars",
    [
        "a",
        "ab",
        "ac",
        "abc",
        "abd",
        "]",
        "-",
        "^",
        "\\",
        "[]-^\\",
        "的我你",
        "XY",
        "一丁七",
        "a" * 5,
        "\x00",  # the lowest code point: the end of the list must not look like the next point
        "\x00\x01",
    ],
)
def test_a_character_class_of_special_or_few_characters_matches_exactly_them(chars: str) -> None:
    universe = {chr(point) for point in range(0x80)} | set("的我你一丁七万丈三")
    assert _class_matches(set(chars), universe) == set(chars)


def test_a_character_class_writes_consecutive_code_points_as_ranges() -> None:
    assert _character_class("cab") == "[a-c]"
    assert _character_class(["x", "a", "b", "z"]) == "[a-bxz]"
    assert _character_class("一丁七") == "[一-丁七]"
    assert _character_class("-]") == r"[\-\]]"


def test_the_chinese_only_class_matches_the_chinese_only_characters() -> None:
    universe = {chr(point) for point in range(0x3400, 0xA000)} | set(CHINESE_ONLY)
    assert _class_matches(set(CHINESE_ONLY), universe) == set(CHINESE_ONLY)


# --- Chinese evidence: one clause ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("clause", "score"),
    [
        ("们", 2),  # Chinese-only
        ("们们", 4),
        ("们可以", 2),  # enough already: the bigram is not looked at
        ("參", 1),  # rare in Japanese
        ("參與", 2),
        ("可以", 2),  # a function bigram
        ("可以但是", 5),  # and 是 alone
        ("我", 1),  # a function word
        ("我是", 2),
        ("完了", 0),  # 了 inside a Japanese compound
        ("目的", 0),
        ("我的目的", 2),  # 的 before a compound (removed) ends a phrase
        ("的", 1),  # 的 at the end
        ("的人", 1),  # 的 linking nouns
        ("的 a", 1),  # 的 before a space
        ("的a", 0),  # 的 before anything else (in Japanese: kana)
        ("的な", 0),
        ("a的", 1),
        ("我的", 2),
        ("參的", 2),
    ],
)
def test_a_clause_scores_its_chinese_signs(clause: str, score: int) -> None:
    assert _score(clause) == score


def test_a_clause_scored_enough_by_its_characters_is_not_scored_further() -> None:
    chinese_only = next(iter(sorted(CHINESE_ONLY)))
    rare = next(iter(sorted(RARE_IN_JAPANESE)))
    assert _score(chinese_only + "我是") == 2
    assert _score(rare + "我是") == 3
    assert _score(rare + rare + "我是") == 2


# --- Chinese evidence: the clause around a sign -------------------------------------------------


def test_a_clause_runs_from_the_delimiter_before_to_the_delimiter_after() -> None:
    text = "前の文。我是学生，你好"
    assert _clause_around(text, text.index("是")) == (4, 8)
    assert _clause_around(text, text.index("你")) == (9, len(text))
    assert _clause_around("我是", 0) == (0, 2)


def test_a_long_clause_is_looked_at_only_its_reach_either_side() -> None:
    position = 300
    # Delimiters just inside the reach are found, just outside are not.
    text = "a" * 99 + "。" + "a" * (position - _CLAUSE_REACH - 100) + "。" + "a" * (_CLAUSE_REACH - 1)
    text = text[:position] + "我" + "a" * (_CLAUSE_REACH - 2) + "。" + "a" * 10
    assert _clause_around(text, position) == (position - _CLAUSE_REACH + 1, position + _CLAUSE_REACH - 1)
    text = "。" + "a" * (position - 1) + "我" + "a" * (2 * _CLAUSE_REACH) + "。"
    assert _clause_around(text, position) == (position - _CLAUSE_REACH, position + _CLAUSE_REACH)
    # The delimiter exactly at the reach after is outside it; the one exactly at the reach before inside.
    text = (
        "a" * (position - _CLAUSE_REACH)
        + "。"
        + "a" * (_CLAUSE_REACH - 1)
        + "我"
        + "a" * (_CLAUSE_REACH - 1)
        + "。b"
    )
    assert _clause_around(text, position) == (position - _CLAUSE_REACH + 1, position + _CLAUSE_REACH)
    # Near the ends of the text.
    assert _clause_around("a" * 50 + "我" + "a" * 50, 50) == (0, 101)


# --- Chinese evidence: a text ---------------------------------------------------------------------


def test_chinese_evidence_counts_each_clause_once_and_every_kind_of_clause() -> None:
    # A Japanese clause with Chinese-only forms (2 of them), a Chinese clause (我, 是: score 2, 4 han),
    # a Japanese clause with no Chinese, a kana-less clause with one weak sign (了 alone: 1), and another
    # Japanese clause with a Chinese-only form and a glossed name (华为, not counted).
    text = "结肠炎ですね。我是学生。日本語です。了解了。華为（ファーウェイ）の这です"
    assert chinese_evidence(text, True) == ChineseEvidence(clauses=3, chars=2 + 4 + 1, score=2 + 1)
    # Without kana in the text, any evidence makes a clause Chinese.
    assert chinese_evidence("我是学生。了解了。你好", False) == ChineseEvidence(
        clauses=3, chars=4 + 3 + 2, score=2 + 1 + 2
    )


def test_chinese_evidence_looks_again_from_the_end_of_a_clause_cut_at_its_reach() -> None:
    text = "我" + "a" * (_CLAUSE_REACH - 1) + "是" + "a" * 10
    # The first sign's clause ends at the reach, where the second sign is: its clause is looked at too.
    assert chinese_evidence(text, False) == ChineseEvidence(clauses=2, chars=1 + 2, score=1 + 2)
    # Signs inside a clause already looked at are not looked at again.
    assert chinese_evidence("我是" + "a" * 10 + "我是", False) == ChineseEvidence(clauses=1, chars=4, score=4)


def test_text_without_chinese_signs_has_no_evidence() -> None:
    assert chinese_evidence("日本語の文章です。完了しました。", True) == ChineseEvidence()
    assert chinese_evidence("", False) == ChineseEvidence(0, 0, 0)
