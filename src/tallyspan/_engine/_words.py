"""Content words of a Japanese or English text, for telling whether an answer addresses its question.

With the optional morphological analyser (``pip install 'tallyspan[ja]'``: fugashi with the unidic-lite
dictionary) a word is the dictionary form (lemma) of a noun, verb, adjective or adjectival noun, so
``桜``, ``咲く`` and ``咲き`` are one word each and a one-kanji noun counts; numbers, counters and words
that only support others (``こと``, ``する``) do not. Without it, the words are the content bigrams
(two adjacent kanji or katakana) and Latin words that ``tallyspan._relevance`` has always used: the
answer's one-kanji words are then invisible, which costs recall (figures in the README).

The analyser is loaded on first use, on the thread that checks (one tagger per thread: a MeCab tagger
is not safe to share), and only by the off_topic rule when the prompt is known.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import lru_cache
from typing import Any

__all__ = ["analyser_available", "content_words"]

#: Parts of speech that carry topic (UniDic's pos1).
_CONTENT_POS = frozenset({"名詞", "動詞", "形容詞", "形状詞"})
#: ... except these sub-classes (pos2): numbers, counters, and nouns that only stand in for another.
_FUNCTION_POS2 = frozenset({"数詞", "助数詞", "非自立可能", "代名詞"})
#: Text analysed at most: the topic shows at the start, and a long answer costs no more.
_MAX_CHARS = 3000

_local = threading.local()
_missing = False


def _tagger() -> Callable[[str], Any] | None:
    global _missing
    if _missing:
        return None
    tagger = getattr(_local, "tagger", None)
    if tagger is None:
        try:
            import fugashi  # type: ignore[import-untyped]  # optional, costly to load: only on first use

            tagger = fugashi.Tagger()
        except Exception:  # not installed, or its dictionary is missing: the bigram words serve
            _missing = True
            return None
        _local.tagger = tagger
    return tagger  # type: ignore[no-any-return]


def analyser_available() -> bool:
    """True when the morphological analyser loads here."""
    return _tagger() is not None


@lru_cache(maxsize=4096)
def content_words(text: str) -> frozenset[str] | None:
    """The lemmas of ``text``'s content words (lowercased Latin ones), or None without the analyser."""
    tagger = _tagger()
    if tagger is None:
        return None
    words = set()
    # MeCab's own text output, split here: about three times cheaper than a Python object a word.
    # unidic-lite's columns: surface, pronunciation, reading, lemma, part of speech (pos1-pos2-...).
    for line in tagger.parse(text[:_MAX_CHARS]).splitlines():  # type: ignore[attr-defined]
        fields = line.split("\t")
        if len(fields) < 5:
            continue
        pos = fields[4].split("-")
        if pos[0] not in _CONTENT_POS or (len(pos) > 1 and pos[1] in _FUNCTION_POS2):
            continue
        lemma = fields[3] or fields[0]
        # A loanword's lemma carries its source word ("アニメ-animation"): one word for アニメ and
        # アニメーション, and for the English word written in Latin letters.
        _, dash, source = lemma.rpartition("-")
        if dash and source.isascii() and source.isalpha():
            lemma = source
        # A one-character verb or adjective (する's stem, いる) carries grammar, not topic.
        if pos[0] == "名詞" or len(lemma) >= 2:
            words.add(lemma.lower())
    return frozenset(words)
