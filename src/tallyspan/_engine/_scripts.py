"""Counting scripts fast, and telling Chinese clauses from Japanese ones; pure functions of the text.

Counting kana and han with a regex character class costs tens of microseconds per thousand characters
(CPython tests every character against the ranges). Here each UTF-16 code unit is classified by its
high and low byte with two ``bytes.translate`` tables and one integer AND, all in C.

Chinese evidence (used only where a clause has no kana, or for Chinese-only character forms):

- Chinese-only characters (``_hanzi_table``, generated from the codecs) weigh 2, characters rare in
  Japanese 1;
- Chinese function words (我, 了, 是, 的 ...) weigh 1 when they are not part of a Japanese compound
  (完了, 現在, 目的 ...), and Chinese function bigrams (可以, 但是 ...) 2.

Only clauses that hold one of those signs are looked at, so ordinary Japanese costs one scan.

The scans (script counts, the signs of Chinese, where Latin letters are) run in C where the optional
module ``tallyspan._engine._scan`` was built: one lookup per character in a table of character classes. Where
it was not (no compiler at install time), or ``TALLYSPAN_NO_EXTENSIONS`` is set, the pure-Python scans
below give the same results at about one and a half times the checks' cost.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from typing import Final, NamedTuple

from tallyspan._engine._hanzi_table import CHINESE_ONLY, RARE_IN_JAPANESE
from tallyspan._extensions import ENV_NO_EXTENSIONS, extensions_disabled

__all__ = [
    "ACCELERATED",
    "KANA",
    "MARKS",
    "SCAN_MODULE",
    "CharacterFinder",
    "ChineseEvidence",
    "ScriptCounts",
    "chinese_evidence",
    "has_fence",
    "latin_bounds",
    "python_latin_bounds",
    "python_script_counts",
    "script_counts",
    "without_whitespace",
]


try:
    if extensions_disabled():  # asked once, here: the engine reads no environment itself
        raise ImportError(f"{ENV_NO_EXTENSIONS} is set")
    from tallyspan._engine import _scan
except ImportError:  # not built (no compiler when it was installed), or turned off: the pure-Python scans
    _scan = None  # type: ignore[assignment]
ACCELERATED: Final = _scan is not None
"""True when the scans run in the C module ``tallyspan._engine._scan``."""
SCAN_MODULE: Final = _scan
"""``tallyspan._engine._scan`` where it is in use, else None (other checks' scans use it too)."""

# The scripts by code point ranges (inclusive); astral characters are in none.
_KANA_RANGES = (
    (0x3005, 0x3006),  # 々 〆
    (0x3041, 0x309F),  # hiragana (not 「」、。)
    (0x30A1, 0x30FA),  # katakana (not ・)
    (0x30FD, 0x30FF),
    (0x31F0, 0x31FF),  # katakana phonetic extensions
    (0xFF66, 0xFF9D),  # halfwidth katakana
)
_HAN_RANGES = ((0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF))
_HANGUL_RANGES = ((0x1100, 0x11FF), (0x3130, 0x318F), (0xAC00, 0xD7FF))


def _ranges_class(ranges: Iterable[tuple[int, int]]) -> str:
    return "[" + "".join(f"{chr(first)}-{chr(last)}" for first, last in ranges) + "]"


KANA = re.compile(_ranges_class(_KANA_RANGES))
HAN = re.compile(_ranges_class(_HAN_RANGES))


def has_fence(text: str) -> bool:
    """True when ``text`` holds a code fence marker (```` ``` ```` or ``~~~``).

    A one-character test first: in CJK text it costs a tenth of the search for three.
    """
    found = MARKS(text)
    return ("`" in found and "```" in text) or ("~" in found and "~~~" in text)


def without_whitespace(text: str) -> str:
    """``"".join(text.split())``: ``text`` without its whitespace. In one pass of C where the module is
    built; the split makes a str of every word first (about 20 instructions a character)."""
    if _scan is not None:
        return _scan.without_whitespace(text)
    return "".join(text.split())


# --- script counts ---------------------------------------------------------------------------------
# One bit per (high byte, low byte) rule; a code unit is in a script when its high byte's bit and
# its low byte's bit agree. Each code unit matches at most one rule.
_HIRAGANA, _KANA_31, _KANA_HALF, _HAN_ANY, _HAN_4D, _HANGUL_ANY, _HANGUL_31, _KATAKANA = (
    1,
    2,
    4,
    8,
    16,
    32,
    64,
    128,
)
_KANA_30 = _HIRAGANA | _KATAKANA
_ANY_LOW = _HAN_ANY | _HANGUL_ANY


def _tables() -> tuple[bytes, bytes]:
    high = bytearray(256)
    low = bytearray(256)
    high[0x30] = _KANA_30
    high[0x31] = _KANA_31 | _HANGUL_31
    high[0xFF] = _KANA_HALF
    high[0x4D] = _HAN_4D
    for byte in (*range(0x34, 0x4D), *range(0x4E, 0xA0), 0xF9, 0xFA):
        high[byte] = _HAN_ANY
    for byte in (*range(0xAC, 0xD8), 0x11):
        high[byte] = _HANGUL_ANY
    for byte in range(256):
        bits = _ANY_LOW
        if 0x41 <= byte <= 0x9F or byte in (0x05, 0x06):
            bits |= _HIRAGANA  # hiragana, 々 and 〆 (not 「」、。)
        if 0xA1 <= byte <= 0xFA or byte >= 0xFD:
            bits |= _KATAKANA  # katakana (not ・ー)
        if byte >= 0xF0:
            bits |= _KANA_31  # katakana phonetic extensions
        if 0x66 <= byte <= 0x9D:
            bits |= _KANA_HALF  # halfwidth katakana
        if byte < 0xC0:
            bits |= _HAN_4D  # the end of extension A (4DC0 and up are hexagram symbols)
        if 0x30 <= byte <= 0x8F:
            bits |= _HANGUL_31  # compatibility jamo
        low[byte] = bits
    return bytes(high), bytes(low)


_HIGH_TABLE, _LOW_TABLE = _tables()


class ScriptCounts(NamedTuple):
    """Characters of each script in a text."""

    kana: int
    han: int
    hangul: int


# Each code unit's byte in the AND of the two translations has at most one bit set, so a script's count
# is the popcount of the AND with a mask holding that script's bits in every byte: C-speed big-integer
# operations instead of one pass over the bytes per bit.
_CHUNK_UNITS = 4096
"""Code units counted per round of big-integer operations (the masks are this many bytes long)."""


def _mask(bits: int) -> int:
    return int.from_bytes(bytes([bits]) * _CHUNK_UNITS, "big")


_KANA_MASK = _mask(_HIRAGANA | _KATAKANA | _KANA_31 | _KANA_HALF)
_HAN_MASK = _mask(_HAN_ANY | _HAN_4D)
_HANGUL_MASK = _mask(_HANGUL_ANY | _HANGUL_31)


def script_counts(text: str) -> ScriptCounts:
    """(kana, han, hangul) characters in ``text``."""
    if text.isascii():
        return _NONE
    if _scan is not None:
        kana, han, hangul = _scan.class_counts(text, _class_table())[:3]
        return ScriptCounts(kana, han, hangul)
    return python_script_counts(text)


def python_script_counts(text: str) -> ScriptCounts:
    """``script_counts`` without the C module (the same counts)."""
    # Little-endian, the machine's order, encodes in ~10 % fewer instructions; the masks are the same byte
    # in every position, so the order of the integers' bytes does not matter.
    units = text.encode("utf-16-le", "surrogatepass")
    kana = han = hangul = 0
    step = 2 * _CHUNK_UNITS
    for start in range(0, len(units), step):
        chunk = units[start : start + step] if len(units) > step else units
        both = int.from_bytes(chunk[1::2].translate(_HIGH_TABLE), "little") & int.from_bytes(
            chunk[0::2].translate(_LOW_TABLE), "little"
        )
        kana += (both & _KANA_MASK).bit_count()
        han += (both & _HAN_MASK).bit_count()
        hangul += (both & _HANGUL_MASK).bit_count()
    return ScriptCounts(kana, han, hangul)


_NONE = ScriptCounts(0, 0, 0)


# --- Chinese evidence ------------------------------------------------------------------------------

# Japanese compounds that contain a character Chinese uses as a function word; removed before scoring.
_JAPANESE_COMPOUNDS = re.compile(
    "完了|終了|修了|満了|魅了|了解|了承|校了|未了|投了|読了|了知|"
    "現在|存在|在庫|在住|在籍|在宅|滞在|所在|不在|健在|潜在|実在|駐在|混在|点在|散在|介在|内在|自在|在留|在任|在外|"
    "是非|是正|国是|社是|"
    "目的|的確|的中|標的|端的|射的|"
    "請求|申請|要請|請負|請願|普請|招請|懇請|強請|勧請|請来|請託|起請"
)
_FUNCTION_CHARS = "我你這嗎呢吧很是了在也請"
_FUNCTION_BIGRAMS = "可以|但是|所以|如果|任何|如有|已經|沒有|什麼|怎麼|一個"
_CHINESE_BIGRAMS = re.compile(_FUNCTION_BIGRAMS)


def _character_class(chars: Iterable[str]) -> str:
    """A regex character class of ``chars`` written as ranges of consecutive code points: thousands of
    han characters make about half as many ranges, and compile in half the time."""
    points = sorted(set(map(ord, chars)))
    parts: list[str] = []
    start = previous = points[0]
    for point in [*points[1:], -1]:
        if point == previous + 1:
            previous = point
            continue
        parts.append(
            re.escape(chr(start))
            if start == previous
            else f"{re.escape(chr(start))}-{re.escape(chr(previous))}"
        )
        start = previous = point
    return f"[{''.join(parts)}]"


@cache
def _chinese_only_re() -> re.Pattern[str]:
    # Compiled on first use (tens of milliseconds): importing the engine stays cheap.
    return re.compile(_character_class(CHINESE_ONLY))


_BIGRAMS = _FUNCTION_BIGRAMS.split("|")


@cache
def _hint_signs() -> frozenset[str]:
    """Characters that are a sign of Chinese wherever they stand."""
    return frozenset([*CHINESE_ONLY, *RARE_IN_JAPANESE, *_FUNCTION_CHARS, "的"])


@cache
def _bigram_firsts() -> dict[str, str]:
    """The first characters of the function bigrams that are not signs themselves, each with the second
    characters that make it a sign."""
    firsts: dict[str, str] = {}
    for bigram in _BIGRAMS:
        if bigram[0] not in _hint_signs():
            firsts[bigram[0]] = firsts.get(bigram[0], "") + bigram[1]
    return firsts


@cache
def _hints() -> re.Pattern[str]:
    # Any sign of Chinese at all: ordinary Japanese usually has only 的, 在 or 了 inside compounds. One
    # scan: a leading character class (the sign characters and the first characters of the function
    # bigrams) lets the engine skip the text in C; a bigram's first character counts only before its second.
    only_firsts = list(_bigram_firsts())
    bigram_check = "|".join(f"(?<={re.escape(bigram[0])})(?={re.escape(bigram[1])})" for bigram in _BIGRAMS)
    return re.compile(
        f"{_character_class([*_hint_signs(), *only_firsts])}"
        f"(?:(?<!{_character_class(only_firsts)})|{bigram_check})"
    )


def _next_hint(prose: str, start: int) -> int:
    """The position of the first sign of Chinese in ``prose`` at or after ``start``, or -1."""
    if _scan is None:
        found = _hints().search(prose, start)
        return found.start() if found else -1
    # A sign, or a bigram's first character before any bigram's second (then checked for its own).
    table = _class_table()
    firsts = _bigram_firsts()
    sign, first, second = _CLASS_HINT, _CLASS_BIGRAM_FIRST, _CLASS_BIGRAM_SECOND
    position: int = _scan.find_sign(prose, table, sign, first, second, start)
    while position >= 0:
        seconds = firsts.get(prose[position])
        if seconds is None or prose[position + 1] in seconds:
            return position
        position = _scan.find_sign(prose, table, sign, first, second, position + 1)
    return -1


# --- the C scans' table ----------------------------------------------------------------------------
_CLASS_KANA, _CLASS_HAN, _CLASS_HANGUL, _CLASS_HINT, _CLASS_LETTER, _CLASS_DIGIT = 1, 2, 4, 8, 16, 32
# The function bigrams' first characters that are no sign by themselves (一 of 一個, 所 of 所以: common in
# Japanese), and the bigrams' second characters: a first counts only before a second.
_CLASS_BIGRAM_FIRST, _CLASS_BIGRAM_SECOND = 64, 128


@cache
def _class_table() -> bytes:
    """The class bits of every BMP code point, for ``tallyspan._engine._scan`` (made on first use: ~2 ms)."""
    table = bytearray(0x10000)
    for ranges, bit in (
        (_KANA_RANGES, _CLASS_KANA),
        (_HAN_RANGES, _CLASS_HAN),
        (_HANGUL_RANGES, _CLASS_HANGUL),
    ):
        for first, last in ranges:
            table[first : last + 1] = bytes([bit]) * (last + 1 - first)  # the scripts do not overlap
    for char in _hint_signs():
        table[ord(char)] |= _CLASS_HINT  # all in the BMP: the table is generated from BMP codecs
    for lead, seconds in _bigram_firsts().items():
        table[ord(lead)] |= _CLASS_BIGRAM_FIRST
        for second in seconds:
            table[ord(second)] |= _CLASS_BIGRAM_SECOND
    for char in string.ascii_letters:
        table[ord(char)] |= _CLASS_LETTER
    for char in string.digits:
        table[ord(char)] |= _CLASS_DIGIT
    return bytes(table)


# An ASCII view of a text, position for position: letters "a", digits "0", anything else " ".
_LETTERS_AND_DIGITS = (
    bytes(
        ord("a") if chr(byte).isalpha() else ord("0") if chr(byte).isdigit() else ord(" ")
        for byte in range(128)
    )
    + b" " * 128
)


def latin_bounds(text: str) -> tuple[int, int] | None:
    """(first ASCII letter, last ASCII letter or digit) in ``text``, or None when it has no ASCII letter:
    where Latin words can be."""
    if _scan is not None:
        table = _class_table()
        first: int = _scan.find_class(text, table, _CLASS_LETTER)
        if first < 0:
            return None
        return first, _scan.rfind_class(text, table, _CLASS_LETTER | _CLASS_DIGIT)
    return python_latin_bounds(text)


def python_latin_bounds(text: str) -> tuple[int, int] | None:
    """``latin_bounds`` without the C module (the same bounds)."""
    view = text.encode("ascii", "replace").translate(_LETTERS_AND_DIGITS)  # "?" for each other character
    first = view.find(b"a")
    if first < 0:
        return None
    return first, max(view.rfind(b"a"), view.rfind(b"0"))


_CLAUSE_DELIMITERS = "。！？!?\n、，,；;：:"
_CLAUSE_END = re.compile(f"[{_CLAUSE_DELIMITERS}]")
_CLAUSE_START = re.compile(f"(?s).*[{_CLAUSE_DELIMITERS}]")
#: A clause longer than this is looked at only this far either side of the sign found.
_CLAUSE_REACH = 200
_CLAUSE_SCORE = 2
# A Chinese-only character run followed by a gloss is a name: 华为（ファーウェイ）.
_GLOSSED_NAME = re.compile(r"[\u3400-\u4DBF\u4E00-\u9FFF\uF900-\uFAFF]+(?=[（(])")


@dataclass(frozen=True)
class ChineseEvidence:
    """Chinese found in a text: clauses, their han characters, and the score of kana-less clauses."""

    clauses: int = 0
    chars: int = 0
    score: int = 0


def _score(clause: str) -> int:
    """Chinese evidence in a clause without kana: Chinese-only characters weigh 2, weaker signs 1."""
    score = 0
    for char in clause:
        if char in CHINESE_ONLY:
            score += 2
        elif char in RARE_IN_JAPANESE:
            score += 1
    if score >= _CLAUSE_SCORE:
        return score
    score += 2 * len(_CHINESE_BIGRAMS.findall(clause))
    rest = _JAPANESE_COMPOUNDS.sub("\u3000", clause)
    for index, char in enumerate(rest):
        if char in _FUNCTION_CHARS:
            score += 1
        elif char == "的":
            # Japanese 的 is a suffix followed by kana (的な, 的に); Chinese 的 ends a phrase or links nouns.
            following = rest[index + 1 : index + 2]
            if not following or HAN.match(following) or not following.strip():
                score += 1
    return score


def _clause_around(text: str, position: int) -> tuple[int, int]:
    lower = max(position - _CLAUSE_REACH, 0)
    before = _CLAUSE_START.match(text, lower, position)
    start = before.end() if before else lower
    after = _CLAUSE_END.search(text, position, position + _CLAUSE_REACH)
    return start, after.start() if after else min(position + _CLAUSE_REACH, len(text))


def chinese_evidence(prose: str, text_has_kana: bool) -> ChineseEvidence:
    """Chinese clauses of ``prose``: kana-less clauses with Chinese evidence (any evidence at all when
    the text has no kana), and Japanese clauses holding Chinese-only character forms (結肠炎)."""
    clauses = chars = total = 0
    position = _next_hint(prose, 0)
    while position >= 0:
        start, end = _clause_around(prose, position)
        clause = prose[start:end]
        if KANA.search(clause):
            found = len(_chinese_only_re().findall(_GLOSSED_NAME.sub("", clause)))
            if found:
                clauses += 1
                chars += found
        else:
            score = _score(clause)
            total += score
            if score >= _CLAUSE_SCORE or (not text_has_kana and score):
                clauses += 1
                chars += len(HAN.findall(clause))
        position = _next_hint(prose, max(end, position + 1))  # the next sign outside this clause
    return ChineseEvidence(clauses, chars, total)


# --- one scan for many one-character tests ----------------------------------------------------------
class CharacterFinder:
    """The characters of a fixed set that a text holds, found in one scan.

    The checks test a text for single characters before their searches (``"<" in text`` before the
    markup search). In a CJK text each such test is a scan of its own, about 1,000 instructions per
    1,000 characters, and one answer gets about fifty. ``finder(text)`` is a str holding each character
    of the set that ``text`` holds: test single characters of the set in it, never longer strings or
    other characters. With the C module it is those characters once each (a handful in prose), from one
    scan; without it, ``text`` itself. The last text's answer is remembered, so the rules that look at
    one answer share its scan.

    Args:
        characters: characters of the set.
        ranges: (first, last) code points of the set, inclusive; the set is in the BMP.
    """

    __slots__ = ("_last", "_points", "_table")

    def __init__(self, characters: Iterable[str] = (), ranges: Iterable[tuple[int, int]] = ()) -> None:
        self._points: frozenset[int] = frozenset()
        self._table: bytes | None = None  # made on the first scan (64 KB)
        self._last: tuple[str | None, str] = (None, "")
        self.add(characters, ranges)

    def add(self, characters: Iterable[str] = (), ranges: Iterable[tuple[int, int]] = ()) -> None:
        """Add characters to the set (a module whose tests look for more characters, at its import)."""
        points = {ord(char) for char in characters}
        for first, last in ranges:
            points.update(range(first, last + 1))
        if any(point > 0xFFFF for point in points):
            raise ValueError("a CharacterFinder's characters are in the BMP")
        self._points = self._points | points
        self._table = None
        self._last = (None, "")

    def __call__(self, text: str) -> str:
        last_text, found = self._last
        if last_text is text:
            return found
        if _scan is None:
            return text
        table = self._table
        if table is None:
            made = bytearray(0x10000)
            for point in self._points:
                made[point] = 1
            table = self._table = bytes(made)
        found = _scan.distinct_in_class(text, table, 1)
        self._last = (text, found)  # one assignment: a thread reading it sees the old pair or the new
        return found

    def may_hold(self, text: str, characters: re.Pattern[str]) -> bool:
        """False only when ``text`` holds no character that ``characters`` (a class of the set's
        characters) matches. Told by searching the handful of characters found; without the C module
        always True, since searching the text itself would cost what the caller's own test costs."""
        return _scan is None or characters.search(self(text)) is not None


MARKS: Final = CharacterFinder(ranges=((0x00, 0x7F), (0x2000, 0x206F), (0x3000, 0x303F), (0xFF00, 0xFFEF)))
"""The ASCII characters, the punctuation marks (general punctuation, CJK symbols and punctuation,
fullwidth forms), and the characters other checks add (the refusal rule's trigger words) that a text
holds: ``"<" in MARKS(text)`` is ``"<" in text``, from one scan per text for all the checks."""
