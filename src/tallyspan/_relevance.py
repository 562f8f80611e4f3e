"""answer_to_other_question: does an answer match another in-flight prompt better than its own?

Japanese has no spaces, so the unit of overlap is the content bigram: two adjacent characters that
are kanji, katakana or letters (hiragana and punctuation carry grammar, not topic), plus whole Latin
words of three letters or more. Pure functions of the text.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["other_question_detail"]

_CONTENT_RUN = re.compile(
    r"[\u3400-\u4DBF\u4E00-\u9FFF\uF900-\uFAFF\u30A1-\u30FF\u31F0-\u31FF\uFF66-\uFF9D々]{2,}|[A-Za-z][A-Za-z0-9]{2,}|\d{2,}"
)
_STOPWORDS_TEXT = (
    "the and for are but not you your with this that from have has was were will would can could what "
    "which who how why when where about into just also very some any all more most please"
)
_STOPWORDS = frozenset(_STOPWORDS_TEXT.split())
#: The other prompt must explain the answer this much better than its own to be flagged.
_MARGIN = 2.0
_MIN_OVERLAP = 0.25
_MIN_FEATURES = 4
#: Shorter outputs ("OK", a bare verdict) are legitimately the same for different prompts.
_MIN_REPEATED_CHARS = 40


def _normalize(text: str) -> str:
    # Lower case only: NFKC of a long Japanese answer costs more than the whole check should.
    return text.lower()


def _features(text: str) -> frozenset[str]:
    features: set[str] = set()
    for run in _CONTENT_RUN.findall(_normalize(text)):
        if run[0].isascii() and run[0].isalpha():
            lower = run.lower()
            if lower not in _STOPWORDS:
                features.add(lower)
            continue
        features.update(run[index : index + 2] for index in range(len(run) - 1))
    return frozenset(features)


def _coverage(prompt: frozenset[str], answer: str) -> float:
    """Share of the prompt's topic features (bigrams, words) the normalized answer repeats."""
    return sum(feature in answer for feature in prompt) / len(prompt) if prompt else 0.0


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
    # Prompts are short: look their features up in the answer rather than building the answer's set.
    answer = _normalize(output)
    own = _features(prompt)
    if len(own) < _MIN_FEATURES or len(_CONTENT_RUN.findall(answer, 0, 400)) < 2:
        return None
    own_score = _coverage(own, answer)
    for index, other in enumerate(other_prompts):
        if other.strip() == prompt.strip():
            continue
        features = _features(other)
        if len(features) < _MIN_FEATURES:
            continue
        other_score = _coverage(features, answer)
        if other_score >= _MIN_OVERLAP and other_score > _MARGIN * own_score:
            return (
                f"matches in-flight prompt #{index} ({other_score:.2f}) better than its own ({own_score:.2f})"
            )
    return None


def off_topic_detail(output: str, prompt: str | None) -> str | None:
    """Placeholder."""
    return None
