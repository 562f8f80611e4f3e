"""Does an answer address its own question? ``off_topic`` and ``answer_to_other_question``.

Japanese has no spaces, so the unit of overlap is the content bigram: two adjacent characters that are
kanji or katakana (hiragana and punctuation carry grammar, not topic), plus whole Latin words of three
letters or more and numbers. An answer addresses its question when it shares some of them with it.

- ``off_topic``: the answer shares (almost) nothing with a question that has a topic of its own, and it
  is long enough that an answer would: at most one shared feature; or at most a few when the answer
  carries the marks of scraped web text (a page title "... | site", breadcrumbs, a source file's
  licence header, a Q&A dump, video boilerplate) that the question did not ask for. An English answer
  to a Japanese question cannot share bigrams, so it is off_topic only with web-text marks and nothing
  shared. A follow-up question ("先ほどの回答を修正して") has no topic of its own and is never judged.
- ``answer_to_other_question``: the answer clearly belongs to another prompt in flight at the same
  time: it covers that prompt's content (half of its features, five at least), its own prompt's hardly,
  and no third prompt comes close. With many prompts in flight a generic answer matches several of
  them a little; a cross-slot answer matches one of them a lot.

Pure functions of the text; prompt features are cached, since the same prompts are in flight for
many checks.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

from tallyspan._scripts import script_counts

__all__ = ["off_topic_detail", "other_question_detail", "web_text_mark"]

_CONTENT_RUN = re.compile(
    r"[\u3400-\u4DBF\u4E00-\u9FFF\uF900-\uFAFF\u30A1-\u30FF\u31F0-\u31FF\uFF66-\uFF9D々]{2,}"
    r"|[A-Za-z][A-Za-z0-9]{2,}|\d{2,}"
)
_STOPWORDS_TEXT = (
    "the and for are but not you your with this that from have has was were will would can could what "
    "which who how why when where about into just also very some any all more most please"
)
_STOPWORDS = frozenset(_STOPWORDS_TEXT.split())
#: The answer is read this far: its topic shows at its start, and a long answer costs no more.
_ANSWER_WINDOW = 1500
# The end of the model's turn, and chat-template markup: what follows is not this answer.
_END_OF_TURN = re.compile(r"<\|(?:im_end|endoftext|eot_id|end)\|>|</s>|\[/INST\]")
_MARKUP = re.compile(r"(?s)<<SYS>>.*?<</SYS>>|<\|[^|<>\n]{1,40}\|>|<<?/?[A-Za-z_]{1,20}>>?|\[/?INST\]")

# --- off_topic -------------------------------------------------------------------------------------

#: A question with fewer topic features than this gives nothing to judge an answer by ...
_MIN_PROMPT_FEATURES = 8
#: ... except scraped web text that shares none of them, down to this many.
_MIN_MARKED_PROMPT_FEATURES = 3
#: An answer with fewer features than this is too short to be expected to share any.
_MIN_ANSWER_FEATURES = 20
#: Off-topic: at most this many bigrams shared with the question and this share of its kanji ...
_MAX_SHARED = 1
_MAX_KANJI_COVERAGE = 0.15
_MAX_HANZI_COVERAGE = 0.3
#: ... or, with web-text marks, at most these (or no bigram shared at all, whatever the kanji).
_MAX_SHARED_MARKED = 3
_MAX_KANJI_COVERAGE_MARKED = 0.25
#: An English answer to a CJK question: judged only past this many words.
_MIN_ANSWER_WORDS = 15
#: ... and without web-text marks only when the question has this many Latin words or long numbers
#: (names, products, years: CEO, JSON, 2021) and a long answer uses none of them.
_MIN_ANCHORS = 2
_MIN_ANCHORED_WORDS = 50
#: A text with fewer CJK characters than this per space-separated word is English; with fewer kana than
#: this, Chinese.
_CJK_PER_WORD = 2
_MIN_KANA = 2
_KANJI = re.compile(r"[\u4E00-\u9FFF々]")
_ANCHOR = re.compile(r"[A-Za-z][A-Za-z0-9]{2,}|\d{3,}")
# A follow-up refers to the conversation instead of stating a topic.
_FOLLOW_UP = re.compile(
    r"先ほど|さきほど|先程|さっき|前の(?:回答|答え|文章|質問|内容)|前述|前回の|続き|続けて|あなたの(?:回答|答え)"
    r"|(?i:\b(?:previous (?:answer|response)|your (?:answer|response)|above (?:answer|response)|continue)\b)"
)
# Marks of scraped web text, each a (name, pattern) the question itself must not contain.
_WEB_TEXT_MARKS: tuple[tuple[str, re.Pattern[str]], ...] = (
    # A page title: "title | site" or "【tag】..." on the first line (not a table row).
    ("page title", re.compile(r"\A[^|\n｜]{4,120}\s[|｜]\s[^|\n｜]{2,80}(?:\n|\Z|[^|\n]*\Z)|\A\s*【[^】\n]{1,30}】")),
    ("dated post", re.compile(r"\A\s*\d{4}年\d{1,2}月(?:\d{1,2}日)?(?:[（(][月火水木金土日][）)])?\s*[:：]")),
    ("breadcrumbs", re.compile(r"[^>\n]{1,40} > [^>\n]{1,40} > [^>\n]{1,40}")),
    ("source file header", re.compile(
        r"(?i)\A\s*(?:/\*|//|#|<!--)[^\n]{0,80}\n?[^\n]{0,80}?(?:copyright|licensed under)"
        r"|\A\s*(?:package \w+|#include\s*<|import \()"
    )),
    ("Q&A dump", re.compile(r"\A\s*Q:\s*\n.*\n\s*A:\s*\n", re.DOTALL)),
    ("web boilerplate", re.compile(
        r"(?i)\bthanks for watching\b|\bin this video\b|\bthis is a (?:video )?tutorial\b|\bsubscribe to (?:my|our)\b"
        r"|\bclick here\b|\bread more\b|\bposted (?:by|on)\b|\ball rights reserved\b"
        r"|記事一覧|の口コミ|口コミ・|投稿一覧|アーカイブ|開催報告|イベント一覧|カテゴリー:|関連記事|続きを読む"
        r"|楽天市場|送料無料"
    )),
)  # fmt: skip


def _normalize(text: str) -> str:
    # Lower case only: NFKC of a long Japanese answer costs more than the whole check should.
    return text.lower()


def _features(text: str) -> frozenset[str]:
    features: set[str] = set()
    for run in _CONTENT_RUN.findall(_normalize(text)):
        if run[0].isascii():
            if run.isdigit() or run not in _STOPWORDS:
                features.add(run)
            continue
        features.update(run[index : index + 2] for index in range(len(run) - 1))
    return frozenset(features)


@lru_cache(maxsize=4096)
def _prompt_features(prompt: str) -> frozenset[str]:
    return _features(prompt)


@lru_cache(maxsize=4096)
def _prompt_kanji(prompt: str) -> frozenset[str]:
    return frozenset(_KANJI.findall(prompt))


@lru_cache(maxsize=4096)
def _prompt_anchors(prompt: str) -> frozenset[str]:
    return frozenset(word.lower() for word in _ANCHOR.findall(prompt) if word.lower() not in _STOPWORDS)


def _first_turn(output: str) -> str:
    """The answer up to the end of the model's turn, without chat-template markup, first chars only."""
    for end in _END_OF_TURN.finditer(output):
        if _MARKUP.sub("", output[: end.start()]).strip():
            output = output[: end.start()]
            break
    if "<" in output or "[" in output:
        output = _MARKUP.sub(" ", output)
    return output.strip()[:_ANSWER_WINDOW]


def web_text_mark(answer: str, prompt: str = "") -> str | None:
    """The name of the first web-text mark in ``answer`` that ``prompt`` does not share, or None."""
    for name, pattern in _WEB_TEXT_MARKS:
        if pattern.search(answer) and not pattern.search(prompt):
            return name
    return None


def _script(text: str) -> str:
    """ja (kana), zh (han without kana) or en (mostly Latin words): what bigrams can be compared in."""
    kana, han, _ = script_counts(text)
    if kana + han < _CJK_PER_WORD * len(text.split()):
        return "en"
    return "ja" if kana >= _MIN_KANA else "zh"


@lru_cache(maxsize=4096)
def _prompt_script(prompt: str) -> str:
    return _script(prompt)


def off_topic_detail(output: str, prompt: str | None) -> str | None:
    """Return a content-free detail when ``output`` does not address ``prompt`` at all, else None."""
    if prompt is None or _FOLLOW_UP.search(prompt):
        return None
    own = _prompt_features(prompt)
    if len(own) < _MIN_MARKED_PROMPT_FEATURES:
        return None
    answer = _first_turn(output)
    features = _features(answer)
    shared = len(own & features)
    if shared > _MAX_SHARED_MARKED:
        return None  # the common case: an answer repeats its question's terms
    script = _script(answer)
    same_script = script != "en" and script == _prompt_script(prompt)
    words = len(answer.split())
    if (same_script and len(features) < _MIN_ANSWER_FEATURES) or (
        not same_script and (shared or (words < _MIN_ANSWER_WORDS and len(features) < _MIN_ANSWER_FEATURES))
    ):
        return None
    mark = web_text_mark(answer, prompt)
    if len(own) < _MIN_PROMPT_FEATURES:
        # A short question: only scraped web text that shares nothing with it is judged.
        return (
            f"{mark}; shares none of the prompt's {len(own)} topic features" if mark and not shared else None
        )
    if same_script:
        # Chinese writes its grammar in han too: its characters overlap by chance more than Japanese kanji.
        kanji_cap = _MAX_KANJI_COVERAGE if script == "ja" else _MAX_HANZI_COVERAGE
        kanji = _prompt_kanji(prompt)
        coverage = sum(char in answer for char in kanji) / len(kanji) if kanji else 0.0
        found = f"shares {shared} of the prompt's {len(own)} topic features, {coverage:.0%} of its kanji"
        if shared <= _MAX_SHARED and coverage < kanji_cap:
            return found
        if mark and (coverage < _MAX_KANJI_COVERAGE_MARKED or not shared):
            return f"{mark}; {found}"
        return None
    # Another language than the question's (an English or Chinese answer to a Japanese question): no
    # bigram can be shared; web-text marks, or none of the question's names and numbers, tell.
    if mark:
        return f"{mark}; shares none of the prompt's {len(own)} topic features"
    anchors = _prompt_anchors(prompt)
    if len(anchors) >= _MIN_ANCHORS and words >= _MIN_ANCHORED_WORDS and anchors.isdisjoint(features):
        return f"uses none of the prompt's {len(anchors)} names and numbers"
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


def _coverage(prompt: frozenset[str], answer: frozenset[str]) -> tuple[float, int]:
    shared = len(prompt & answer)
    return (shared / len(prompt) if prompt else 0.0), shared


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
        for other_prompt, other_output in other_answers:
            if other_output.strip() == stripped_output and other_prompt.strip() != prompt.strip():
                return "the same output was returned for a different prompt"
    if not other_prompts:
        return None
    answer = _first_turn(output)
    features = _features(answer)
    own_score, _ = _coverage(_prompt_features(prompt), features)
    if own_score > _MAX_OWN_COVERAGE or web_text_mark(answer) is not None:
        return None  # it does address its own prompt, or it is no answer to anything (off_topic)
    best = (0.0, 0, -1)
    runner_up = 0.0
    own_key = prompt.strip()
    for index, other in enumerate(other_prompts):
        features_of_other = _prompt_features(other)
        if len(features_of_other) < _MIN_OTHER_SHARED or other.strip() == own_key:
            continue  # too short to be recognised in an answer (and then to compete with one that is)
        score, shared = _coverage(features_of_other, features)
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
