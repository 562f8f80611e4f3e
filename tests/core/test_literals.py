"""literal_alternation: a trie pattern finds exactly what the plain longest-first alternation finds."""

from __future__ import annotations

import random
import re

import pytest

from tallyspan._engine._literals import literal_alternation


def _plain(words: list[str]) -> re.Pattern[str]:
    return re.compile("|".join(re.escape(word) for word in sorted(words, key=len, reverse=True)))


def _matches(pattern: re.Pattern[str], text: str) -> list[tuple[int, str]]:
    return [(match.start(), match.group()) for match in pattern.finditer(text)]


def test_the_longest_word_wins_and_a_shorter_one_is_found_where_the_longer_one_stops() -> None:
    pattern = re.compile(literal_alternation(["number one", "num", "number", "導入", "導入実績", "#"]))
    text = "numbe number one #1 導入実績と導入"
    assert _matches(pattern, text) == [
        (0, "num"),
        (6, "number one"),
        (17, "#"),
        (20, "導入実績"),
        (25, "導入"),
    ]


def test_characters_special_to_regexes_are_literal() -> None:
    words = ["a.b", "(x)", "a|b", "c*", "[d]", "\\e", "^f$", "？"]
    pattern = re.compile(literal_alternation(words))
    assert [found for _, found in _matches(pattern, "axb a.b (x) a|b c* [d] \\e ^f$ ？ ab cc")] == words


def test_random_word_lists_match_like_the_plain_alternation() -> None:
    rng = random.Random(20261203)
    alphabet = "abc導入業界#%"
    for _ in range(300):
        words = list({"".join(rng.choices(alphabet, k=rng.randint(1, 5))) for _ in range(rng.randint(1, 12))})
        text = "".join(rng.choices(alphabet + " ", k=200))
        assert _matches(re.compile(literal_alternation(words)), text) == _matches(_plain(words), text), words


@pytest.mark.parametrize(
    ("words", "reason"),
    [([], "no words to match"), (["ok", ""], "an empty word would match at every position")],
)
def test_no_words_or_an_empty_word_is_refused_saying_which(words: list[str], reason: str) -> None:
    with pytest.raises(ValueError, match=f"^{reason}$"):
        literal_alternation(words)


def test_the_pattern_is_the_trie_with_a_group_only_where_branches_or_an_optional_ending_need_one() -> None:
    # One test of the next character picks the branch; a single branch needs no group of its own.
    assert literal_alternation(["ab"]) == "ab"
    assert literal_alternation(["導入", "導入実績", "採用"]) == "(?:導入(?:実績)?|採用)"
    assert literal_alternation(["a", "ab", "ac"]) == "a(?:b|c)?"
