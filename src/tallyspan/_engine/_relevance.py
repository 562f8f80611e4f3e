"""Does an answer address its own question? ``off_topic`` and ``answer_to_other_question``.

Japanese has no spaces, so the unit of overlap is the content bigram: two adjacent characters that are
kanji or katakana (hiragana and punctuation carry grammar, not topic), plus whole Latin words of three
letters or more and numbers. An answer addresses its question when it shares some of them with it.

- ``off_topic``: the answer shares (almost) nothing with a question that has a topic of its own, and it
  is long enough that an answer would: at most one bigram and under 15 % of the question's kanji (30 %
  of its hanzi in Chinese, whose grammar words are han too); or at most a few when it carries the marks
  of scraped web text (a page title "... | site", breadcrumbs, a dated post, a source file's licence
  header, a Q&A dump, video or shop boilerplate) that the question did not ask for. An answer in
  another language than its question cannot share bigrams: it is off_topic only with web-text marks,
  or when it uses none of the question's names and numbers (CEO, JSON, 2021). A follow-up question
  ("先ほどの回答を修正して") has no topic of its own and is not judged; nor is a refusal (``_checks``).
- ``answer_to_other_question``: the answer clearly belongs to another prompt in flight at the same
  time: it covers that prompt's content (half of its features, five at least), its own prompt's hardly,
  and no third prompt comes within half of it. With many prompts in flight a generic answer matches
  several of them a little; a cross-slot answer matches one of them a lot.

With other prompts in flight (the prompts of other calls), an answer is also judged by vocabulary
(``_unrelated_words``): content words from the optional analyser (``_words``), each weighed by how rare
it is among the prompts in flight. A long answer that covers its own question's weight hardly more
than the other questions' (under half a standard deviation above their mean) is off topic: a scraped
article, a diary, a press release given for a question. This replaced the own prompt's rank among the
prompts in flight by unweighted word overlap, which a long text reaches for half of all prompts by
chance (figures per model: ``bench/label_agreement.py``). A binomial test of the shared words against
the rate at which the answer uses other prompts' words was measured beside it: as precise at its best
threshold, and less stable across thresholds.

Pure functions of the text, linear in it: a question's features are extracted once and cached (the
same prompts are in flight for many checks); an answer is tested by substring search for a few
questions and through an index of its bigrams for many.
"""

from __future__ import annotations

import difflib
import functools
import math
import operator
import os
import re
import statistics
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache

from tallyspan._engine._refusal import first_turn
from tallyspan._engine._scripts import MARKS, script_counts, without_whitespace
from tallyspan._engine._words import content_words

__all__ = ["off_topic_detail", "other_question_detail", "web_text_mark"]

_CJK_RUN = re.compile(
    r"[\u3400-\u4DBF\u4E00-\u9FFF\uF900-\uFAFF\u30A1-\u30FF\u31F0-\u31FF\uFF66-\uFF9D々]{2,}"
)
_STOPWORDS_TEXT = (
    "the and for are but not you your with this that from have has was were will would can could what "
    "which who how why when where about into just also very some any all more most please"
)
_STOPWORDS = frozenset(_STOPWORDS_TEXT.split())
# ASCII letters (lowercased) and digits kept, everything else (non-ASCII arrives as "?") a separator.
_TOKEN_BYTES = bytes(
    byte if 0x30 <= byte <= 0x39 or 0x61 <= byte <= 0x7A else byte | 0x20 if 0x41 <= byte <= 0x5A else 0x20
    for byte in range(256)
)
#: The answer is read this far: its topic shows at its start, and a long answer costs no more.
_ANSWER_WINDOW = 1500
# Chat-template markup: not words of the answer.
_MARKUP = re.compile(
    r"(?s)<<SYS>>(?:(?!<<SYS>>|<</SYS>>).)*<</SYS>>|<\|[^|<>\n]{1,40}\|>|<<?/?[A-Za-z_]{1,20}>>?|\[/?INST\]"
)
_KANJI = re.compile(r"[\u4E00-\u9FFF々]")
#: Testing more bigrams than this against one answer is cheaper through an index of its bigrams.
_INDEX_AFTER = 120


def _tokens(text: str) -> frozenset[str]:
    """Latin words (three characters at least, not stopwords, lowercased) and numbers (two digits at least)."""
    # Lowercased by the table, as ASCII bytes: str.lower() on a CJK text costs ~60 instructions a character.
    view = text.encode("ascii", "replace").translate(_TOKEN_BYTES)
    if not view.strip():
        return frozenset()  # no ASCII letter or digit (most CJK answers): no decoding and splitting
    words = view.decode("ascii").split()
    return frozenset(
        word
        for word in words
        if (word.isdigit() and len(word) >= 2)
        or (len(word) >= 3 and not word.isdigit() and word not in _STOPWORDS)
    )


@dataclass(frozen=True)
class _Topic:
    """What a question is about: its content bigrams, Latin words and numbers, and kanji."""

    bigrams: frozenset[str]
    tokens: frozenset[str]
    kanji: frozenset[str]
    script: str
    follow_up: bool
    """The question refers to the conversation instead of stating a topic ("先ほどの回答を修正して")."""

    @property
    def size(self) -> int:
        return len(self.bigrams) + len(self.tokens)

    @property
    def anchors(self) -> frozenset[str]:
        """Names and long numbers: what an answer in another language would still write the same."""
        return frozenset(token for token in self.tokens if not token.isdigit() or len(token) >= 3)


def _each_bigram(text: str) -> Iterator[str]:
    """Content bigrams in text order, repeats included: adjacent kanji or katakana (which have no case)."""
    for run in _CJK_RUN.finditer(text):
        run_text = run.group()
        for index in range(len(run_text) - 1):
            yield run_text[index : index + 2]


def _bigrams(text: str) -> frozenset[str]:
    """The distinct content bigrams of ``text``."""
    return frozenset(_each_bigram(text))


def _has_bigrams(text: str, count: int) -> bool:
    """``len(_bigrams(text)) >= count``, stopping at the ``count``-th distinct bigram: an answer has
    hundreds, and building the set of all of them cost more than the rest of the rule."""
    if count <= 0:
        return True
    seen: set[str] = set()
    for bigram in _each_bigram(text):
        seen.add(bigram)
        if len(seen) >= count:
            return True
    return False


@lru_cache(maxsize=4096)
def _topic(prompt: str) -> _Topic:
    return _Topic(
        _bigrams(prompt),
        _tokens(prompt),
        frozenset(_KANJI.findall(prompt)),
        _script(prompt),
        _FOLLOW_UP.search(prompt) is not None,
    )


class _Answer:
    """An answer's first turn, without markup, as far as it is read; tested against topics."""

    def __init__(self, output: str) -> None:
        self.text = _first_turn(output)
        self.tokens = _tokens(self.text)
        self._index: frozenset[str] | None = None

    @functools.cached_property
    def words(self) -> frozenset[str]:
        """Content words: the analyser's lemmas, or the bigrams and the Latin words and numbers."""
        words = content_words(self.text)
        return words if words is not None else _bigrams(self.text) | self.tokens

    @functools.cached_property
    def script(self) -> str:
        """ja, zh or en (counted only when off_topic needs it: most answers share their question's terms)."""
        return _script(self.text)

    def index(self) -> None:
        """Index every bigram of the answer, for testing many topics against it."""
        if self._index is None:
            self._index = frozenset(map(operator.add, self.text, self.text[1:]))

    def shared(self, topic: _Topic) -> int:
        found = len(topic.tokens & self.tokens)
        if self._index is not None:
            return found + len(topic.bigrams & self._index)
        return found + sum(map(self.text.__contains__, topic.bigrams))

    def coverage(self, topic: _Topic) -> tuple[float, int]:
        shared = self.shared(topic)
        return (shared / topic.size if topic.size else 0.0), shared

    def kanji_coverage(self, topic: _Topic) -> float:
        return sum(map(self.text.__contains__, topic.kanji)) / len(topic.kanji) if topic.kanji else 0.0


@lru_cache(maxsize=8)
def _answer(output: str) -> _Answer:
    """The same output is judged by both rules, one after the other: prepare it once."""
    return _Answer(output)


def _first_turn(output: str) -> str:
    """The answer up to the end of the model's turn, without chat-template markup, first chars only."""
    found = MARKS(output)
    if "<" in found or "[" in found:
        output = _MARKUP.sub(" ", first_turn(output))
    return output.strip()[:_ANSWER_WINDOW]


#: A text with fewer CJK characters than this per space-separated word is English ...
_CJK_PER_WORD = 2
#: ... and a CJK text with fewer kana than this is Chinese.
_MIN_KANA = 2


_HAS_LETTER = re.compile(r"[^\W\d_]")  # any letter, of any script


def _script(text: str) -> str:
    """ja (kana), zh (han without kana) or en (mostly Latin words): what bigrams can be compared in."""
    counts = script_counts(text)
    kana, han = counts.kana, counts.han
    # Words, not whitespace-separated tokens: a formula's symbols and numbers ("y = (3/4)x^3 - e^(2x)")
    # do not make a Japanese question English.
    cjk = kana + han
    tokens = text.split()
    if cjk < _CJK_PER_WORD * len(tokens) and cjk < _CJK_PER_WORD * sum(
        1 for token in tokens if _HAS_LETTER.search(token)
    ):
        return "en"
    return "ja" if kana >= _MIN_KANA else "zh"


# --- web-text marks --------------------------------------------------------------------------------

# Marks of scraped web text, each a (name, pattern) the question itself must not contain. Each pattern
# is anchored at the start or starts with a literal, so a search costs one pass.
_WEB_TEXT_MARKS: tuple[tuple[str, re.Pattern[str]], ...] = (
    # A page title: "title | site" or "【tag】..." on the first line (not a table row).
    ("page title", re.compile(r"\A[^|\n｜]{4,120}\s[|｜]\s[^|\n｜]{2,80}(?:\n|\Z|[^|\n]*\Z)|\A\s*【[^】\n]{1,30}】")),
    ("dated post", re.compile(r"\A\s*\d{4}年\d{1,2}月(?:\d{1,2}日)?(?:[（(][月火水木金土日][）)])?\s*[:：]")),
    ("breadcrumbs", re.compile(r" > [^>\n]{1,40} > ")),
    ("source file header", re.compile(
        r"(?i)\A\s*(?:/\*|//|#|<!--)[^\n]{0,80}\n?[^\n]{0,80}?(?:copyright|licensed under)"
        r"|\A\s*(?:package \w+|#include\s*<|import \()"
    )),
    ("Q&A dump", re.compile(r"\A\s*Q:\s*\n.*\n\s*A:\s*\n", re.DOTALL)),
    ("web boilerplate", re.compile(
        r"(?i)thanks for watching|in this video|this is a (?:video )?tutorial|subscribe to (?:my|our) |click here"
        r"|read more|posted (?:by|on) |all rights reserved"
    )),
    ("web boilerplate", re.compile(
        r"記事一覧|の口コミ|口コミ・|投稿一覧|アーカイブ|開催報告|イベント一覧|カテゴリー[:：]|関連記事|続きを読む"
        r"|楽天市場|送料無料"
    )),
)  # fmt: skip


def web_text_mark(answer: str, prompt: str = "") -> str | None:
    """The name of the first web-text mark in ``answer`` that ``prompt`` does not share, or None."""
    for name, pattern in _WEB_TEXT_MARKS:
        if pattern.search(answer) and not pattern.search(prompt):
            return name
    return None


# --- off_topic -------------------------------------------------------------------------------------

#: A question with fewer topic features than this gives nothing to judge an answer by ...
_MIN_PROMPT_FEATURES = 8
#: ... except scraped web text that shares none of them, down to this many.
_MIN_MARKED_PROMPT_FEATURES = 3
#: A CJK answer with fewer content bigrams than this is too short to be expected to share one: a
#: four-line poem on the seasons need not say "季節" to be on topic.
_MIN_ANSWER_FEATURES = 20
#: Off-topic: at most this many features shared with the question and this share of its kanji ...
_MAX_SHARED = 1
_MAX_KANJI_COVERAGE = 0.15
_MAX_HANZI_COVERAGE = 0.3
#: ... or, with web-text marks, at most these (or no feature shared at all, whatever the kanji).
_MAX_SHARED_MARKED = 3
_MAX_KANJI_COVERAGE_MARKED = 0.25
#: An answer in another language than its question: judged only past this many words ...
_MIN_ANSWER_WORDS = 15
#: ... and without web-text marks only when the question has this many names and numbers and a long
#: answer uses none of them.
_MIN_ANCHORS = 2
_MIN_ANCHORED_WORDS = 50
# A follow-up refers to the conversation instead of stating a topic.
_FOLLOW_UP = re.compile(
    r"先ほど|さきほど|先程|さっき|前の(?:回答|答え|文章|質問|内容)|前述|前回の|上記|上の(?:文|内容|回答|答え|詩|例)"
    r"|(?<!手)続き|続けて|あなたの(?:回答|答え)"
    r"|(?i:\b(?:previous (?:answer|response)|your (?:answer|response)|above (?:answer|response)|continue)\b)"
)


def off_topic_detail(output: str, prompt: str | None, other_prompts: Sequence[str] = ()) -> str | None:
    """Return a content-free detail when ``output`` does not address ``prompt`` at all, else None.

    ``other_prompts`` (questions of other calls in flight) tell the words every question uses from the
    words of this one."""
    if prompt is None:
        return None
    topic = _topic(prompt)  # cached: the same prompts come again, and each fact of one is found once
    if topic.follow_up:
        return None
    answer = _answer(output)
    form = _non_answer(output, answer, prompt)
    if form is not None:
        return form
    if topic.size >= _MIN_MARKED_PROMPT_FEATURES:
        found = _shares_nothing(answer, topic, prompt)
        if found is not None:
            return found
    return _unrelated_words(answer, topic, prompt, other_prompts)


def _shares_nothing(answer: _Answer, topic: _Topic, prompt: str) -> str | None:
    """The answer shares (almost) no bigram, Latin word or number with its question."""
    shared = answer.shared(topic)
    if shared > _MAX_SHARED_MARKED or (shared and topic.size < _MIN_PROMPT_FEATURES):
        return None  # the common case: an answer repeats its question's terms
    same_script = answer.script != "en" and answer.script == topic.script
    if same_script:
        if not _has_bigrams(answer.text, _MIN_ANSWER_FEATURES):
            return None
    elif shared or (len(answer.text.split()) < _MIN_ANSWER_WORDS and answer.script == "en"):
        return None
    mark = web_text_mark(answer.text, prompt)
    if topic.size < _MIN_PROMPT_FEATURES:
        # A short question: only scraped web text that shares nothing with it is judged.
        return (
            f"{mark}; shares none of the prompt's {topic.size} topic features"
            if mark and not shared
            else None
        )
    if same_script:
        coverage = answer.kanji_coverage(topic)
        found = f"shares {shared} of the prompt's {topic.size} topic features, {coverage:.0%} of its kanji"
        # Chinese writes its grammar in han too: its characters overlap by chance more than kanji do.
        if shared <= _MAX_SHARED and coverage < (
            _MAX_KANJI_COVERAGE if answer.script == "ja" else _MAX_HANZI_COVERAGE
        ):
            return found
        if mark and (coverage < _MAX_KANJI_COVERAGE_MARKED or not shared):
            return f"{mark}; {found}"
        return None
    if mark:
        return f"{mark}; shares none of the prompt's {topic.size} topic features"
    anchors = topic.anchors
    if (
        len(anchors) >= _MIN_ANCHORS
        and len(answer.text.split()) >= _MIN_ANCHORED_WORDS
        and anchors.isdisjoint(answer.tokens)
    ):
        return f"uses none of the prompt's {len(anchors)} names and numbers"
    return None


# --- off_topic by the words answer and question share ------------------------------------------------

#: Below this many content words a question gives no vocabulary to judge by.
_MIN_PROMPT_WORDS = 5
#: An answer this long (characters) that uses none of its question's content words (this many at least:
#: a short support question has two or three) is off topic ...
_MIN_UNRELATED_PROMPT_WORDS = 2
_MIN_UNRELATED_CHARS = 300
#: ... and, with this many other prompts in flight, one shorter than this is not judged by rank.
_MIN_RANKED_CHARS = 40
_MIN_RANKED_PROMPTS = 10
#: Off topic (an answer shorter than ``_MIN_UNRELATED_CHARS``): the answer matches at least this share of
#: the other prompts in flight as well as its own, word for word (an on-topic answer matches its own
#: better than nearly all of them: measured, the 90th percentile of on-topic answers is 0.02).
_MIN_RANK = 0.5
#: Off topic (an answer of ``_MIN_UNRELATED_CHARS`` or more): the answer covers its own prompt's words,
#: each weighed by how rare it is among the prompts in flight, by less than this many standard deviations
#: above how it covers the other prompts'. An answer uses its question's rare words: measured on the
#: labelled answers of 300 characters or more, 225 of 230 on-topic ones stand 2 deviations or more above.
_MIN_MARGIN = 0.5
#: ... unless it covers this share of its own prompt's weight, whatever the others: then it does address
#: its question, however much of the others' it also touches.
_MAX_UNRELATED_COVERAGE = 0.3


def _prompt_words(prompt: str) -> frozenset[str]:
    """A prompt's content words: the analyser's lemmas, or its topic's bigrams, Latin words and numbers."""
    words = content_words(prompt)
    if words is not None:
        return words
    topic = _topic(prompt)
    return topic.bigrams | topic.tokens


def _distinct_others(prompt: str, other_prompts: Sequence[str]) -> list[int]:
    """The index of each other prompt in flight, once per text (compared stripped, the first kept) and
    never the own prompt's: the same prompt in flight twice is not a runner-up to itself."""
    distinct: dict[str, int] = {}
    for index, other in enumerate(other_prompts):
        distinct.setdefault(other.strip(), index)
    distinct.pop(prompt.strip(), None)
    return list(distinct.values())


def _rarity(vocabularies: Sequence[frozenset[str]]) -> dict[str, float]:
    """Each word's weight: the inverse of the share of the prompts in flight that use it (a word every
    question uses, 説明 or する, weighs nearly nothing; one that only this question uses weighs most)."""
    counts = Counter(word for vocabulary in vocabularies for word in vocabulary)
    total = len(vocabularies) + 1
    return {word: math.log(total / (count + 0.5)) for word, count in counts.items()}


def _covered(vocabulary: frozenset[str], words: frozenset[str], rarity: dict[str, float]) -> float:
    """The share of ``vocabulary``'s weight that ``words`` use."""
    whole = sum(rarity[word] for word in vocabulary)
    return sum(rarity[word] for word in vocabulary & words) / whole if whole > 0 else 0.0


def _unrelated_words(answer: _Answer, topic: _Topic, prompt: str, other_prompts: Sequence[str]) -> str | None:
    """Off topic by vocabulary: a long answer that uses none of its question's content words, or one
    that uses its question's rare words hardly more than it uses the other prompts' in flight."""
    if answer.script == "en" or answer.script != topic.script:
        return None  # words are compared within one language
    own = _prompt_words(prompt)
    if len(own) < _MIN_UNRELATED_PROMPT_WORDS:
        return None
    words = answer.words
    shared = len(own & words)
    if not shared:
        if len(answer.text) >= _MIN_UNRELATED_CHARS:
            return f"uses none of the prompt's {len(own)} content words"
        return None
    if len(own) < _MIN_PROMPT_WORDS or len(answer.text) < _MIN_RANKED_CHARS:
        return None
    vocabularies = [own]
    for index in _distinct_others(prompt, other_prompts):
        vocabulary = _prompt_words(other_prompts[index])
        if len(vocabulary) >= _MIN_PROMPT_WORDS:
            vocabularies.append(vocabulary)
    if len(vocabularies) <= _MIN_RANKED_PROMPTS:
        return None
    if len(answer.text) >= _MIN_UNRELATED_CHARS:
        # A long text on any topic uses some words of every question: this one's question's rare words,
        # no more than the others', is what an unrelated text does.
        rarity = _rarity(vocabularies)
        coverage = _covered(own, words, rarity)
        if coverage >= _MAX_UNRELATED_COVERAGE:
            return None
        others = [_covered(vocabulary, words, rarity) for vocabulary in vocabularies[1:]]
        mean = statistics.fmean(others)
        if coverage < mean + _MIN_MARGIN * statistics.pstdev(others, mean):
            return (
                f"uses its prompt's rare words ({coverage:.0%}) hardly more than those of {len(others)} other "
                f"prompts in flight ({mean:.0%} on average)"
            )
        return None
    # A short answer cannot be expected to use many of its question's words: it is judged only when
    # it matches the other prompts as well as its own, word for word.
    share = shared / len(own)
    as_good = sum(len(vocabulary & words) >= share * len(vocabulary) for vocabulary in vocabularies[1:])
    if as_good >= _MIN_RANK * (len(vocabularies) - 1):
        return f"matches {as_good} of {len(vocabularies) - 1} other prompts in flight as well as its own ({share:.0%})"
    return None


# --- non-answers, by their form --------------------------------------------------------------------

#: An echo: the answer starts with this much of its prompt (or all of a shorter one) ...
_MIN_ECHO_CHARS = 20
#: ... and adds no more characters than this to it (a short answer after an echoed instruction is one).
_MAX_ECHO_ADDED = 3
#: Offers and questions back: only answers this short are read sentence by sentence.
_MAX_OFFER_CHARS = 250
_SENTENCE = re.compile(r"(?:[^。！？!?.\n]|\.(?!\s|\Z))+[。！？!?.]*")
_OFFER = re.compile(
    r"お手伝い|手伝わせ|説明(?:する|いたす|させていただく)?ことができ|喜んで(?:お手伝い|ご説明|お答え|協力)|承知(?:しました|いたしました)"
    r"|かしこまりました|わかりました|分かりました|質問させて|お答えします|お任せください"
    # "Sure", "Of course" alone say yes: an answer to a yes-or-no question, not an offer.
    r"|(?i:happy to help|glad to help|love to help|i can help|i(?:'d| would) (?:be happy|love) to"
    r"|let me know|let me start|i can explain)"
)
#: A greeting or a bare yes may stand beside offers and questions back; alone it is no reply of that kind
#: (a bare "Sure." answers a yes-or-no question).
_GREETING = re.compile(
    r"(?i)(?:こんにちは|こんばんは|おはようございます|ありがとう(?:ございます)?|はい|もちろん(?:です)?|hello|hi|hey"
    r"|thanks?(?: you)?|sure|absolutely|of course|certainly|okay|ok)[!！。.、,]?"
)
#: Bullet and rule characters: a reply padded with empty list items is no longer for them.
_PADDING_MARKS = "-*・_=#|"


def _short_without_padding(compact: str) -> bool:
    r"""``compact`` (a text without its whitespace) holds at most ``_MAX_OFFER_CHARS`` characters other
    than ``_PADDING_MARKS``. Counted with ``str.count``: a regex substitution over the whole reply
    (``[\s\-*・_=#|]+``) cost about 200,000 instructions for 1,000 characters of Japanese, a third of a
    check; and a head that already holds more other characters decides without the rest."""
    if len(compact) <= _MAX_OFFER_CHARS:
        return True
    head = compact[: _MAX_OFFER_CHARS + 1]
    if not any(map(head.__contains__, _PADDING_MARKS)):
        return False  # more other characters than that in the head alone
    return len(compact) - sum(map(compact.count, _PADDING_MARKS)) <= _MAX_OFFER_CHARS


_QUESTION_BACK = re.compile(
    r"(?:教えて|お聞かせ|ますか|でしょうか|ですか)[^。！!]*[？?]\s*\Z"
    r"|(?i:\b(?:can|could|would|will) you\b.*\?\s*\Z|\btell me\b|\bwhat\b.*\?\s*\Z)"
)


# A question put to the reader: it ends in a question mark, or in Japanese in か (ですか。ますか。) ...
_QUESTION = re.compile(r"(?:[？?]|(?:です|ます|でしょう|ません|のです|んです)か[。.]?)[\s)）」』]*\Z")
# ... and asks something: a question word or the reader named ("どんな", "あなたは", "you"). "〜でしょうか。"
# alone is a hedged statement ("答えは 11 でしょうか。"), and "〜ではないでしょうか" an opinion.
_ASKS = re.compile(
    r"何|なに|なん|どう|どこ|どちら|どっち|どれ|どの|どんな|誰|だれ|いつ|なぜ|いくつ|いくら|あなた|君|きみ|お前"
    r"|(?i:\b(?:what|which|who|whom|whose|where|when|why|how|you|your)\b)"
)
_HEDGE = re.compile(r"(?:では|じゃ)ない(?:でしょう|です|の)?か|のではないか")
# ... unless it suggests an answer ("〜してみてはいかがでしょうか", "Why not try ...?"): advice, not asking.
_SUGGESTION = re.compile(
    r"(?:て|で)(?:は|も)?(?:いかが|どう)(?:でしょう|ですか)|ましょうか|ませんか"
    r"|(?i:\bhow about\b|\bwhy not\b|\bhave you tried\b)"
)
#: A question is made of words: fewer letters than this is a formula's placeholder ("(1/3 × 33) = ?").
_MIN_QUESTION_LETTERS = 4
# A task set for the reader: an instruction about given material, or an exam's imperative.
_INSTRUCTION = re.compile(
    r"(?:以下|次|下記|上記)の[^。！？\n]{0,80}(?:ください|下さい|なさい|せよ)"
    r"|(?:答え|選び|述べ|説明し|書き|求め|示し|考え|訳し|まとめ)なさい"
    r"|(?:答え|述べ|説明せ|示せ|求め|訳せ)よ[。.]?\Z"
    r"|(?i:^\s*(?:write|explain|describe|translate|summari[sz]e|answer|list|choose|calculate)\b.*"
    r"\b(?:the following|below)\b)"
)
# A label that heads such a task ("問題：", "Q1.", "Instruction:").
_TASK_LABEL_WORD = (
    r"(?:問題|設問|質問|問|指示|課題|(?i:q|question|instruction|task|exercise))\s*[0-9０-９]*\s*"
)
_TASK_LABEL = re.compile(r"\A" + _TASK_LABEL_WORD + r"[:：.．]?\Z")
# A prompt that asks for questions or tasks to be made ("質問を3つ考えて", "よくある質問", "write quiz
# questions"), or a dialogue, or to transform a text it gives (whose form the output keeps: a question corrected or
# translated is a question): then asking or setting tasks may be the answer. "次の質問に答えて" asks for
# an answer, and "問題を抱えた二人" names a problem: neither is one.
_ASKS_FOR_QUESTIONS = re.compile(
    r"(?:質問|問い|問題|クイズ|設問|課題|指示|プロンプト|Q)(?:文|例)?(?:を|だったかを|かを)?"
    r"(?:[0-9０-９一二三四五六七八九十]+(?:つ|個|問)|いくつか|複数)?(?:ほど|程度)?"
    r"(?:作|考え|挙げ|あげ|出し|出題|教え|書い|書き|リスト|生成|用意|提案)"
    r"|聞かれる|よくある(?:質問|疑問)|想定(?:質問|問答)|FAQ|インタビュー|面接|クエリ|検索ワード|キーワード|疑問"
    # ... or lines of a dialogue, where a question is a line like any other
    r"|セリフ|台詞|会話|対話"
    r"|直して|直す|訳して|翻訳|訳す|書き換え|言い換え|要約|修正|校正|添削|整えて"
    r"|(?i:\b(?:write|create|generate|list|suggest|come up with|make|ask|give me)\b[^.?!\n]{0,30}"
    r"\b(?:questions?|quiz(?:zes)?|exercises?|prompts?|instructions?)\b|\bfaq\b|\binterview|\bquer(?:y|ies)\b"
    r"|\bdialog(?:ue)?\b|\bconversation\b|\bscript\b"
    r"|\bsearch terms\b|\bkeywords?\b|\btranslat|\brewrite|\bparaphras|\bcorrect\b|\bproofread|\bsummari[sz]e)"
)
# A list item: a deliverable's entry (a list of questions is what was asked for, an FAQ, queries).
_LIST_ITEM = re.compile(r"(?m)^[ \t]*(?:[-*・•]|\d{1,3}[.)．、]|[(（]\d{1,3}[)）])[ \t]*\S")
#: Courtesy or an offer beside questions is one short sentence, not a paragraph that mentions help.
_MAX_OFFER_SENTENCE_CHARS = 60
#: A reply of questions back or tasks alone is read sentence by sentence up to this length.
_MAX_ASKING_CHARS = 600
# The reply's first sentence, after a task label ("問題：") if any.
_OPENING_SENTENCE = re.compile(
    r"\s*(?:" + _TASK_LABEL_WORD + r"[:：.．]\s*)?([^。！？!?\n]{1,300}[。！？!?]?)"
)
# A sentence that sets the reader a task: it ends by asking for it.
_INSTRUCTION_END = re.compile(r"(?:ください|下さい|なさい|せよ)[。！!]?\Z")
#: A rewritten task names this many content bigrams its prompt does not have (new material's terms) ...
_MIN_NEW_TASK_FEATURES = 3
#: ... and is this close to one of its prompt's sentences, character for character (difflib's ratio:
#: measured, a task rewritten about new material 0.74; an answer's own opening instruction under 0.35).
_MIN_TASK_SIMILARITY = 0.5


def _non_answer(output: str, answer: _Answer, prompt: str) -> str | None:
    """A reply that answers nothing by its form: only chat-template markup, the prompt echoed, an
    offer to help and questions back to the user with nothing else, or a new task set for the reader
    (an instruction about "the following", an exam question) instead of the answer."""
    text = answer.text
    if not text:
        return "only chat-template markup, no answer" if output.strip() else None
    compact = without_whitespace(text)
    asked = without_whitespace(prompt)
    common = len(os.path.commonprefix((compact, asked)))  # noqa: RUF071 - characters are what is compared
    if common >= min(_MIN_ECHO_CHARS, len(asked)) and len(compact) - common <= _MAX_ECHO_ADDED:
        return "echoes the prompt and adds nothing"
    # Checked before the length cut: a new task comes with its own material, of any length.
    rewritten = _rewritten_task(text, prompt, asked)
    if rewritten is not None:
        return rewritten
    offer_length = len(text) <= _MAX_OFFER_CHARS or (
        len(text) <= 4 * _MAX_OFFER_CHARS and _short_without_padding(compact)
    )
    if not offer_length and len(text) > _MAX_ASKING_CHARS:
        return None
    sentences = _sentences(text)
    # Questions back count unless the prompt wants questions (or gave one to correct), or they suggest.
    questions_wanted = _ASKS_FOR_QUESTIONS.search(prompt) is not None
    if offer_length:
        asking = [
            part
            for part in sentences
            if _OFFER.search(part)
            or (not questions_wanted and _QUESTION_BACK.search(part) and not _SUGGESTION.search(part))
        ]
        if asking and all(part in asking or _GREETING.fullmatch(part) for part in sentences):
            return "offers help or asks back, and answers nothing"
    if len(text) <= _MAX_ASKING_CHARS and not questions_wanted:
        return _asks_or_sets_tasks(text, sentences)
    return None


def _rewritten_task(text: str, prompt: str, asked: str) -> str | None:
    """The reply opens with its prompt's instruction rewritten about new material: the same request
    ("以下の文章を読んで、…を数えてください") with words of its own ("人間", "宇宙" for "アマゾン", "川"), and
    what follows is that new material, not an answer. A model that restates its task before answering
    says it in the prompt's words (or quotes it), and an answer that opens with an instruction of its
    own ("以下の手順で設定してください") is not shaped like the prompt's. ``asked``: the prompt without
    whitespace, which the caller already made."""
    opening = _OPENING_SENTENCE.match(text)
    if opening is None:
        return None
    sentence = opening.group(1).strip()
    if not _INSTRUCTION_END.search(sentence) or without_whitespace(sentence) in asked:
        return None
    if _ASKS_FOR_QUESTIONS.search(prompt) or _topic(prompt).follow_up:
        return None  # asked for a task or question, or to rework the conversation: an instruction may answer
    new = _bigrams(sentence) - _topic(prompt).bigrams
    if len(new) < _MIN_NEW_TASK_FEATURES:
        return None
    # The closest of the prompt's sentences, character for character (a few sentences of short text).
    matcher = difflib.SequenceMatcher(None, sentence, autojunk=False)
    for part in _SENTENCE.findall(prompt):
        matcher.set_seq2(part)
        if matcher.quick_ratio() >= _MIN_TASK_SIMILARITY and matcher.ratio() >= _MIN_TASK_SIMILARITY:
            return "rewrites its task as a new instruction instead of answering"
    return None


def _sentences(text: str) -> list[str]:
    """The reply's sentences, without list bullets and labels' colons around them."""
    sentences = (part.strip(" -*・:：\t") for part in _SENTENCE.findall(text))
    return [part for part in sentences if part]


def _is_question_back(sentence: str) -> bool:
    """A question that asks the reader something (not a hedge, a suggestion or a formula's "= ?")."""
    if not _QUESTION.search(sentence) or _HEDGE.search(sentence) or _SUGGESTION.search(sentence):
        return False
    if len(_HAS_LETTER.findall(sentence)) < _MIN_QUESTION_LETTERS:
        return False
    return sentence.rstrip()[-1:] in "？?" or _ASKS.search(sentence) is not None


def _asks_or_sets_tasks(text: str, sentences: list[str]) -> str | None:
    """Every sentence (of ``text``) is a question put to the reader or a task set for them (with its labels
    and courtesies): the question thrown back, or the task rewritten as a new instruction or exam question."""
    if len(_LIST_ITEM.findall(text)) >= 2:
        return None  # a list: entries of a deliverable
    questions = tasks = 0
    for part in sentences:
        if _TASK_LABEL.match(part):
            continue
        if _INSTRUCTION.search(part):
            tasks += 1
        elif _is_question_back(part):
            questions += 1
        elif not (
            _GREETING.fullmatch(part) or (len(part) <= _MAX_OFFER_SENTENCE_CHARS and _OFFER.search(part))
        ):
            return None  # a statement: something is said, perhaps the answer
    if tasks:
        return "sets the reader a new task instead of answering"
    if questions:
        return "asks questions back and answers nothing"
    return None


# --- answer_to_other_question ----------------------------------------------------------------------

#: The other prompt: at least this share of its features in the answer, and this many.
_MIN_OTHER_COVERAGE = 0.5
_MIN_OTHER_SHARED = 5
#: The own prompt: at most this share of its features in the answer.
_MAX_OWN_COVERAGE = 0.1
#: No third prompt may come within this factor of the best match.
_RUNNER_UP_FACTOR = 0.5
#: Shorter outputs ("OK", a bare verdict) are legitimately the same for different prompts.
_MIN_REPEATED_CHARS = 40


def other_question_detail(
    output: str,
    prompt: str | None,
    other_prompts: Sequence[str] = (),
    other_answers: Sequence[tuple[str, str]] = (),
) -> str | None:
    """Return a content-free detail when ``output`` answers another question, else None.

    Args:
        output: the answer.
        prompt: the question it was asked.
        other_prompts: questions of other calls in flight at the same time.
        other_answers: (prompt, output) of other recent calls: the same output given for a different
            prompt is an answer to the other question.
    """
    if prompt is None:
        return None
    stripped_output = output.strip()
    if len(stripped_output) >= _MIN_REPEATED_CHARS:
        own_prompt = prompt.strip()
        for other_prompt, other_output in other_answers:
            # The short prompts first: a call repeated with its own prompt needs no copy of its output.
            if other_prompt.strip() != own_prompt and other_output.strip() == stripped_output:
                return "the same output was returned for a different prompt"
    if not other_prompts:
        return None
    answer = _answer(output)
    # Prompts too short to be recognised in an answer can neither be named nor compete with one that is.
    others = [
        (index, topic)
        for index in _distinct_others(prompt, other_prompts)
        if (topic := _topic(other_prompts[index])).size >= _MIN_OTHER_SHARED
    ]
    if sum(len(topic.bigrams) for _, topic in others) > _INDEX_AFTER:
        answer.index()
    own_score, _ = answer.coverage(_topic(prompt))
    if own_score > _MAX_OWN_COVERAGE or web_text_mark(answer.text) is not None:
        return None  # it does address its own prompt, or it is no answer to anything (off_topic)
    best = (0.0, 0, -1)
    runner_up = 0.0
    for index, topic in others:
        score, shared = answer.coverage(topic)
        if score > best[0]:
            runner_up = best[0]
            best = (score, shared, index)
        elif score > runner_up:
            runner_up = score
    score, shared, index = best
    if (
        score >= _MIN_OTHER_COVERAGE
        and shared >= _MIN_OTHER_SHARED
        and runner_up <= _RUNNER_UP_FACTOR * score
    ):
        return f"matches in-flight prompt #{index} ({score:.2f}) better than its own ({own_score:.2f})"
    return None
