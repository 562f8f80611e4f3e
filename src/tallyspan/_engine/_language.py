"""The language checks: Japanese, Chinese, English and Korean by Unicode rules, judged on prose.

What each type means is fixed by the labelled data's definitions (README, "What is checked"):

- ``not_japanese``: Japanese was required and the prose has no kana at all. A deliverable that is only
  code, JSON, CSV, numbers or math has no prose, hence no language; a list of kanji-only Japanese words
  is Japanese (a kana-less clause is Chinese only with Chinese evidence, see ``_scripts``).
- ``chinese_in_japanese``: a Japanese text (kana present) holds Chinese-only text.
- ``broken_language_mix``: a Japanese text holds whole English sentences, or sentences that switch to
  English part-way (English grammar words, an English phrase of lowercase words, several English words
  in one sentence). Loanwords, names, titles, acronyms, code, glosses, quoted terms and single words
  do not count, nor English sentences the question asked for.

Prose is the text without code (fenced, inline, a bare JSON document or program, or a block of lines
without kana that a parser or lexer reads as code, see ``_code``), URLs, TeX, chat-template
markup, glosses (``基準率の無視（base rate neglect）``) and quotes. Kana inside quotes makes a text
Japanese only when there is enough of it (a quoted Japanese paragraph, not one quoted word).

General language-ID libraries label kanji-only Japanese lines as Chinese, so we decide from scripts.
Everything here is a pure function of the text, linear, with the scanning done by compiled regexes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from itertools import pairwise
from typing import NamedTuple

from tallyspan._contract._contracts import SUPPORTED_LANGUAGES
from tallyspan._engine._code import TOKEN_BUDGET, is_code
from tallyspan._engine._code import closed as _closed
from tallyspan._engine._code import is_json as _is_json
from tallyspan._engine._code import is_python as _is_python
from tallyspan._engine._jsonschema import parse_json_output
from tallyspan._engine._scripts import KANA, MARKS, chinese_evidence, has_fence, latin_bounds, script_counts
from tallyspan._engine._taxonomy import ViolationType

__all__ = [
    "SUPPORTED_LANGUAGES",
    "ScriptProfile",
    "language_violations",
    "profile",
    "requested_languages",
    "reworked_material",
]

_CODE_FENCE = re.compile(r"(?ms)^[ \t]*(```|~~~)[^\n]*\n.*?(?:^[ \t]*\1[ \t]*$|\Z)")
_INLINE_CODE = re.compile(r"`[^`\n]+`")
_URL = re.compile(r"(?i)\b(?:https?://|www\.)\S+|\b[\w.+-]+@[\w-]+\.[\w.-]+")
# Latin-only parentheses after a term are glosses: 基準率の無視（base rate neglect）, CO₂(g).
_GLOSS = re.compile(
    r"[（(][^（）()\n\u3400-\u4DBF\u4E00-\u9FFF\uF900-\uFAFF\u3041-\u309F\u30A1-\u30FF\u31F0-\u31FF\uFF66-\uFF9D]{1,80}[）)]"
)
# TeX math: \[...\], \(...\), $$...$$, $...$ and \commands.
# Each span ends at the next opener too, so unclosed ones cost one pass.
_MATH = re.compile(
    r"(?s)\\\[(?:(?!\\[\[\]]).)*\\\]|\\\((?:(?!\\[()]).)*\\\)|\$\$(?:(?!\$\$).)*\$\$|\$[^$\n]{1,200}\$"
    r"|\\[A-Za-z]+"
)
# Chat-template and markup tokens (<|im_end|>, <<SYS>>, </s>) are not words of any language.
# HTML and XML tags with their attributes (<meta charset="UTF-8" />) are markup too.
_MARKUP = re.compile(
    r"<\|[^|<>\n]{1,40}\|>|<<?/?[A-Za-z_]{1,20}>>?|</?[A-Za-z][\w:-]{0,30}(?:\s[^<>\n]{0,300})?/?>|<!DOCTYPE[^<>\n]*>"
)
# Quotes: 「」『』"" “” and '...' around CJK text (an apostrophe in English is not a quote).
_QUOTED = re.compile(
    r"「[^」「\n]{0,400}」|『[^』『\n]{0,400}』|《[^》《\n]{0,400}》|〈[^〉〈\n]{0,400}〉|\"[^\"\n]{0,400}\"|“[^”“\n]{0,400}”"
    r"|'[^'\n]{0,400}?[\u3041-\u30FF\u4E00-\u9FFF][^'\n]{0,400}?'"
)
_QUOTE_MARKS = ("「", "『", "《", "〈", '"', "“", "'")
# The letter is matched before the look-behind: a pattern that starts with a character class lets the
# engine skip the (mostly CJK) text fast.
_LATIN_TOKEN = re.compile(
    r"[A-Za-z](?<![\\^_A-Za-z0-9].)[A-Za-z0-9]*(?:['’._/+^-][A-Za-z0-9]+)*(?![(A-Za-z0-9])"
)
_SENTENCE_END = re.compile(r"[。！？!?\n]|\.(?=\s|$)")
_UP_TO_SENTENCE_END = re.compile(r"(?s).*(?:[。！？!?\n]|\.(?=\s))")
_CJK = re.compile(r"[\u3041-\u30FF\u3400-\u4DBF\u4E00-\u9FFF\uF900-\uFAFF\uAC00-\uD7AF々]")

# English words that carry grammar; two of them inside a Japanese sentence make a broken mix.
_ENGLISH_FUNCTION_WORDS_TEXT = (
    "a an the is are was were be been being am to of in on at for with from by and or but not no this "
    "that these those it its we you they he she i me my our your their them us will would can could "
    "should shall may might must do does did have has had as if so then than there here what which "
    "who whom how why when where about into just also very some any all more most please thank thanks "
    "let need needs"
)
_ENGLISH_FUNCTION_WORDS = frozenset(_ENGLISH_FUNCTION_WORDS_TEXT.split())
# Lowercase abbreviations and units that Japanese text uses as symbols.
_NOT_WORDS = frozenset(
    {"vs", "etc", "ok", "eg", "ie", "aka", "approx", "max", "min", "ex", "no", "ca", "kg", "km", "cm", "mm",
     "mg", "ml", "kb", "mb", "gb", "tb", "ms", "sec", "px", "pt", "am", "pm"}
)  # fmt: skip
#: Fewest words in a whole English sentence (shorter lines are labels, names and headings) ...
_MIN_SENTENCE_WORDS = 4
#: ... or one fewer with one of these (as written: "Is" opens a title as often as a question).
_FINITE_VERBS = frozenset(
    {
        "is",
        "are",
        "was",
        "were",
        "am",
        "will",
        "would",
        "can",
        "could",
        "should",
        "must",
        "does",
        "did",
        "has",
        "had",
    }
)
#: Kana inside quotes that makes a text Japanese (a quoted paragraph, not a quoted word or two).
_MIN_QUOTED_KANA = 10
#: Kana outside quotes that makes a text Japanese without a Japanese sentence ending (です。) ...
_MIN_KANA = 10
#: ... unless the han around it is this many times the kana, nearly all in Chinese clauses: Chinese prose
#: that names Japanese words (a question about じまん and ほこり answered in Chinese) has a few kana,
#: Japanese prose has far more (kanji-heavy Japanese has a kana for every two or three kanji).
_HAN_PER_MENTIONED_KANA = 10
_CHINESE_SHARE_OF_HAN = 0.8
#: A particle after a kanji, katakana or closing bracket: Japanese grammar, where a term or a heading
#: (教師あり学習) has none. This many make a few kana beside English sentences a Japanese clause.
_PARTICLE = re.compile(r"[\u4E00-\u9FFF\u30A0-\u30FF」』）)][をにはがでへ]")
_MIN_PARTICLES = 2
# A Japanese sentence ends in hiragana and a full stop (です。ました！): Japanese grammar, not a term.
_JAPANESE_SENTENCE_END = re.compile(r"[\u3041-\u309F][。！？]")
#: A kana-less text with more Latin words than CJK characters is English (with a few kanji terms).
_CJK_PER_WORD = 1
#: Fewest Latin words that, without an English function word or a sentence's end, are code, not prose.
_MIN_IDENTIFIER_WORDS = 5
# A sentence's end in Latin-script prose: a letter, then . ! or ?, then a space or the end.
_PROSE_SENTENCE_END = re.compile(r"[A-Za-zÀ-ÿ][.!?](?:\s|\Z)")
_ENGLISH_REQUEST = re.compile(r"(?i)英語で|英語に|英訳|英文|英作文|\bin english\b|\binto english\b")


class ScriptProfile(NamedTuple):
    """What a text's prose is made of (outside code, URLs, glosses and quotes). A named tuple: one or more
    is made for every checked output, and a frozen dataclass of 13 fields costs about 2 µs to make."""

    primary: str
    """ja, zh, en, ko, code (only code, no prose) or none (empty, emoji, numbers)."""
    kana: int = 0
    han: int = 0
    hangul: int = 0
    words: int = 0
    """Latin-script words."""
    function_words: int = 0
    """English function words (the, is, we ...)."""
    ordinary_words: int = 0
    """Lowercase English words that are not names, acronyms, identifiers or function words."""
    chinese_clauses: int = 0
    """Clauses without kana that carry Chinese evidence, and Japanese clauses with Chinese-only forms."""
    chinese_chars: int = 0
    """Han characters in those clauses."""
    english_sentences: int = 0
    """Whole English sentences (outside quotes)."""
    switches: int = 0
    """Sentences with CJK text that switch to English part-way."""
    quoted_kana: int = 0
    """Kana inside quotes."""
    japanese_sentences: bool = False
    """True when the prose has a Japanese sentence (hiragana before a full stop)."""
    particles: int = 0
    """Particles after kanji or katakana, counted only for a few kana beside English sentences."""
    short_english_sentences: int = 0
    """Three-word English sentences with a finite verb ("The answer is: 11"): a mix inside Japanese, but
    too short to make a text with a little kana English."""

    @property
    def japanese(self) -> bool:
        """True when the prose is (at least partly) Japanese: a Japanese sentence, enough kana of its own
        or in a quoted passage."""
        return _is_japanese(
            self.kana,
            self.quoted_kana,
            self.words,
            self.japanese_sentences,
            self.english_sentences,
            self.han,
            self.chinese_chars,
            self.particles,
        )


@dataclass
class _English:
    words: int = 0
    function: int = 0
    ordinary: int = 0
    sentences: int = 0
    short_sentences: int = 0
    switches: int = 0


def _set_aside_code(text: str) -> tuple[str, str]:
    """(prose, code): fenced and inline code, a bare JSON document or program, and the blocks of lines
    without Japanese prose that a parser or lexer reads as code (``_code.is_code``) go to code."""
    code_parts: list[str] = []

    def keep(match: re.Match[str]) -> str:
        code_parts.append(match.group(0))
        return "\n"

    stripped = text.strip()
    if stripped[:1] in ("{", "[") and stripped[-1:] in ("}", "]") and _is_json(stripped):
        return "", text
    if _is_code_document(_strip_markup(stripped)):
        return "", text
    prose = _CODE_FENCE.sub(keep, text) if has_fence(text) else text
    prose = _set_aside_code_blocks(prose, code_parts)
    if "`" in MARKS(prose):
        prose = _INLINE_CODE.sub(keep, prose)
    prose = _strip_markup(prose)
    return prose, "\n".join(code_parts)


_ANY_KANA = re.compile(r"[\u3041-\u30FF\uFF66-\uFF9D]")
_CODE_SIGN = re.compile(r"[A-Za-z{}\[\]<>]")
_BLANK_LINES = re.compile(r"\n[ \t]*\n")


def _set_aside_code_blocks(prose: str, code_parts: list[str]) -> str:
    """``prose`` without the runs of lines without kana (blank lines inside a run included) that are
    code, as a whole or paragraph by paragraph: the only places code can be told from prose without a
    Japanese sentence in the way. A run without a Latin letter or a bracket is not looked at."""
    lines = prose.split("\n")
    kept: list[str] = []
    run: list[str] = []
    # The blocks judged, and the lexers' tokens for all of them: bounded per text (``_code``).
    budget = [_MAX_BLOCKS, TOKEN_BUDGET]
    for line in lines:
        if _ANY_KANA.search(line) is None:
            run.append(line)
            continue
        if run:
            kept.append(_without_code("\n".join(run), code_parts, budget))
            run = []
        kept.append(line)
    if run:
        kept.append(_without_code("\n".join(run), code_parts, budget))
    return "\n".join(kept)


#: The most blocks and paragraphs of one text judged as code or prose (the rest are judged as prose).
_MAX_BLOCKS = 64


def _judged_code(block: str, budget: list[int]) -> bool:
    if budget[0] <= 0 or _CODE_SIGN.search(block) is None:
        return False
    budget[0] -= 1
    tokens = budget[1:]
    found = is_code(block, _has_sentence, tokens)
    budget[1] = tokens[0]
    return found


def _without_code(block: str, code_parts: list[str], budget: list[int]) -> str:
    if _CODE_SIGN.search(block) is None:
        return block
    if _judged_code(block, budget):
        code_parts.append(block)
        return ""
    if not _BLANK_LINES.search(block):
        return block
    paragraphs = _BLANK_LINES.split(block)
    for index, paragraph in enumerate(paragraphs):
        if _judged_code(paragraph, budget):
            code_parts.append(paragraph)
            paragraphs[index] = ""
    return "\n\n".join(paragraphs)


#: Three Latin words or more in a row, one space (or a comma and a space) apart: the shape English grammar
#: takes in prose, where code puts operators, brackets and dots between its names.
_WORD_RUN = re.compile(r"(?<![\w.$@#/\\-])[A-Za-z][A-Za-z'’]*(?:,? [A-Za-z][A-Za-z'’]*){2,}(?![\w(])")


def _has_sentence(text: str) -> bool:
    """True when ``text`` holds English prose: three words or more in a row, among them an English
    function word and an ordinary lowercase word ("the value is null"; not "N=1 to 5", not
    "GROUP BY name")."""
    for run in _WORD_RUN.finditer(text):
        function = ordinary = False
        for word in run.group(0).replace(",", " ").split():
            lower = word.lower()
            if lower in _ENGLISH_FUNCTION_WORDS and word in (lower, lower.capitalize()):
                function = True
            elif word == lower and lower not in _NOT_WORDS and len(word) > 1:
                ordinary = True
        if function and ordinary:
            return True
    return False


def _has_code_signs(prose: str) -> bool:
    # One-character tests first: a longer ASCII needle in CJK text is searched far more slowly.
    found = MARKS(prose)
    if any(char in found for char in ";{}=$"):
        return True
    if "/" in found and ("//" in prose or "/*" in prose or _PATH.search(prose)):
        return True
    if "-" in found and _COMMAND_OPTION.search(prose):
        return True
    return ("#" in found and "#include" in prose) or (" " in found and "import " in prose)


# A command line's signs: an option after a space ("grep -c", "ls --all"; prose hyphenates without the
# space, and a dash between words has one after it too), a file path of two parts at least ("/var/log").
_COMMAND_OPTION = re.compile(r"(?:^|[ \t])--?[A-Za-z][\w-]*(?=[ \t]|$)", re.MULTILINE)
_PATH = re.compile(r"(?:^|[ \t])(?:~|\.{1,2})?/[\w.-]+/[\w./-]*")


#: A first line this short that ends in a colon labels the document below it ("JSON Object:").
_LABEL_LINE = re.compile(r"\A[^\n:：]{0,30}[:：][ \t]*\n")
_MAX_PARSED_CHARS = 20_000


def _is_code_document(text: str) -> bool:
    """The whole deliverable (after an optional label line) is a JSON document, truncated or not, or a
    Python module: told by the parsers made for them, not by the look of its lines."""
    if len(text) > _MAX_PARSED_CHARS:
        return False
    # With the first line as a label ("JSON Object:"), and as it is ("def main():" is code, not a label).
    for body in {_LABEL_LINE.sub("", text, count=1).strip(), text.strip()}:
        if not body:
            continue
        if body[0] in "{[":
            if _is_json(body) or _is_json(_closed(body)):
                return True
        elif _is_python(body):
            return True
    return False


def _word_kinds(prose: str, start: int = 0, end: int | None = None) -> _English:
    """Count English words, and find whole English sentences and sentences that switch to English.

    Tokens are looked for between ``start`` and ``end`` only (where the prose has Latin letters).
    """
    found = _English()
    tokens = list(_LATIN_TOKEN.finditer(prose, start, len(prose) if end is None else end))
    if not tokens:
        return found
    kinds: list[tuple[int, int, str]] = []  # (start, end, kind): f function, o ordinary, c other word
    for index, match in enumerate(tokens):
        token = match.group(0)
        lower = token.lower()
        if len(token) == 1 and token not in ("I", "a", "A"):
            continue  # single letters are labels and variables (A社, aとb)
        if lower in _ENGLISH_FUNCTION_WORDS and token in (lower, lower.capitalize()):
            if lower == "a" and not _article(prose, tokens, index):
                continue
            kinds.append((match.start(), match.end(), "f"))
        elif token == lower and token.isalpha() and lower not in _NOT_WORDS:
            kinds.append((match.start(), match.end(), "o"))
        else:
            kinds.append((match.start(), match.end(), "c"))
    found.words = len(kinds)
    found.function = sum(kind == "f" for _, _, kind in kinds)
    found.ordinary = sum(kind == "o" for _, _, kind in kinds)
    if found.function + found.ordinary == 0:
        return found  # names and acronyms only: no English grammar anywhere
    _judge_sentences(prose, kinds, found)
    return found


def _article(prose: str, tokens: list[re.Match[str]], index: int) -> bool:
    """A lone "a" is the article when a lowercase word follows after one space."""
    if index + 1 >= len(tokens):
        return False
    end = tokens[index].end()
    following = tokens[index + 1]
    # One space, not any one character: in "aとbox" or "a、cat" the "a" is a label.
    return following.start() == end + 1 and prose[end] == " " and following.group(0).islower()


def _judge_sentences(prose: str, kinds: list[tuple[int, int, str]], found: _English) -> None:
    previous_end = 0
    index = 0
    while index < len(kinds):
        before = _UP_TO_SENTENCE_END.match(prose, previous_end, kinds[index][0])
        sentence_start = before.end() if before else previous_end
        end_match = _SENTENCE_END.search(prose, kinds[index][1])
        sentence_end = end_match.end() if end_match else len(prose)
        members = []
        while index < len(kinds) and kinds[index][0] < sentence_end:
            members.append(kinds[index])
            index += 1
        sentence = prose[sentence_start:sentence_end]
        previous_end = sentence_end
        # Distinct words: a lowercase brand repeated (mixi ... mixi) is one name, not English grammar.
        function_words = {prose[start:end] for start, end, kind in members if kind == "f"}
        function = len({word.lower() for word in function_words})
        ordinary = len({prose[start:end] for start, end, kind in members if kind == "o"})
        if not function and not ordinary:
            continue
        if _CJK.search(sentence) is None:
            if function and ordinary:
                if len(members) >= _MIN_SENTENCE_WORDS:
                    found.sentences += 1
                elif len(members) == _MIN_SENTENCE_WORDS - 1 and function_words & _FINITE_VERBS:
                    # Three words with a finite verb beside a content word ("The answer is: 11"), where a
                    # heading has none ("How it works", "The Art of War").
                    found.short_sentences += 1
            continue
        # Inside a Japanese sentence, capitalised function words belong to titles (The Last of Us).
        function = len({word for word in function_words if word.islower() or word == "I"})
        if function >= 2 or function + ordinary >= 3 or _english_phrase(prose, members):
            found.switches += 1


def _english_phrase(prose: str, members: list[tuple[int, int, str]]) -> bool:
    """Two adjacent words (one space apart) forming English: a lowercase word after a lowercase or
    function word ("electoral system", "The sentence"); names and titles are capitalised."""
    for (_, first_end, first), (second_start, second_end, second) in pairwise(members):
        if (
            second == "o"
            and first in ("o", "f")
            and second_end - second_start >= 3
            and prose[first_end:second_start] == " "
        ):
            return True
    return False


def _is_japanese(
    kana: int,
    quoted_kana: int,
    words: int,
    sentence_end: bool,
    english_sentences: int,
    han: int = 0,
    chinese_chars: int = 0,
    particles: int = 0,
) -> bool:
    """Japanese prose: a Japanese sentence, a good deal of kana, or kana with no whole English sentence
    around. A few Japanese terms as headings of English paragraphs ("教師あり学習") do not make a text
    Japanese; Japanese verbs inside English grammar ("We need to 確認する the data") do, and so does a
    Japanese clause before English paragraphs (its particles after kanji: 英語を日本語へ). Nor do Japanese
    words named in Chinese prose (few kana among much han, most of it in Chinese clauses)."""
    if sentence_end:
        return True
    if _CHINESE_SHARE_OF_HAN * han <= chinese_chars and _HAN_PER_MENTIONED_KANA * (kana + quoted_kana) < han:
        return False
    return (
        kana >= _MIN_KANA
        or quoted_kana >= _MIN_QUOTED_KANA
        or (kana > 0 and (not english_sentences or particles >= _MIN_PARTICLES))
        or (quoted_kana > 0 and not words)
    )


def _profile_of(prose: str, quoted_kana: int = 0) -> ScriptProfile:
    kana, han, hangul = script_counts(prose)
    english = _English()
    # The token scan tests every character; in CJK prose only the stretch from the first Latin letter to
    # the last letter or digit (and one more, for the token's look-ahead) can hold a token. Found in C.
    letters = latin_bounds(prose)
    if letters is not None:
        first_letter, last = letters
        english = _word_kinds(prose, first_letter, min(last + 2, len(prose)))
    cjk = kana + han
    chinese = chinese_evidence(prose, kana > 0) if han else None
    sentence_end = bool(kana) and _JAPANESE_SENTENCE_END.search(prose) is not None
    chinese_chars = chinese.chars if chinese is not None else 0
    # Particles are looked for only where they decide: a few kana beside whole English sentences.
    particles = (
        len(_PARTICLE.findall(prose)) if kana and english.sentences and kana < _MIN_KANA and han else 0
    )
    japanese = _is_japanese(
        kana, quoted_kana, english.words, sentence_end, english.sentences, han, chinese_chars, particles
    )
    if hangul and hangul >= cjk:
        primary = "ko"
    elif not cjk and not english.words:
        primary = "none"
    elif japanese:
        primary = "ja"
    elif cjk < _CJK_PER_WORD * english.words:
        primary = "en"  # a stray kanji or a glossed term in English prose does not make it Japanese
    elif (
        kana
        and _CHINESE_SHARE_OF_HAN * han <= chinese_chars
        and _HAN_PER_MENTIONED_KANA * (kana + quoted_kana) < han
    ):
        primary = "zh"  # Chinese prose naming Japanese words
    elif not kana and han:
        primary = (
            "zh" if chinese is not None and chinese.score else "ja"
        )  # kanji-only without Chinese is Japanese
    else:
        primary = "en"
    return ScriptProfile(
        primary,
        kana,
        han,
        hangul,
        english.words,
        english.function,
        english.ordinary,
        chinese.clauses if chinese else 0,
        chinese.chars if chinese else 0,
        english.sentences,
        english.switches,
        quoted_kana,
        sentence_end,
        particles,
        english.short_sentences,
    )


def _strip_markup(prose: str) -> str:
    # Cheap substring tests first: most outputs have no URL, TeX or markup to set aside.
    found = MARKS(prose)
    if ("/" in found and "://" in prose) or ("w" in found and "www." in prose) or "@" in found:
        prose = _URL.sub(" ", prose)
        found = MARKS(prose)
    if "\\" in found or "$" in found:
        prose = _MATH.sub(" ", prose)
        found = MARKS(prose)
    if "<" in found:
        prose = _MARKUP.sub(" ", prose)
    return prose


def profile(text: str) -> ScriptProfile:
    """Profile ``text``: its primary script and the counts the language checks use.

    Prose is the text without code, URLs, glosses and quotes; kana inside quotes is counted apart.
    When only quotes have letters, the quotes are the prose; when only code has letters the primary is
    ``code`` (or ``ja``/``zh`` when the code holds CJK text, a JSON deliverable's values).
    """
    prose, code = _set_aside_code(text)
    unquoted, quoted_kana = prose, 0
    # Each scan only where its opening mark occurs: substring tests cost far less than the scans.
    found = MARKS(prose)
    if any(mark in found for mark in _QUOTE_MARKS):
        quotes: list[str] = []

        def set_aside(match: re.Match[str]) -> str:
            quotes.append(match.group(0))
            return " "

        unquoted = _QUOTED.sub(set_aside, prose)
        quoted_kana = sum(len(KANA.findall(quote)) for quote in quotes)
    marks_left = MARKS(unquoted)
    if "(" in marks_left or "（" in marks_left:
        unquoted = _GLOSS.sub(" ", unquoted)
    result = _profile_of(unquoted, quoted_kana)
    if result.primary != "none":
        return result
    result = _profile_of(prose)  # no prose outside quotes: the quotes are the deliverable
    if result.primary != "none" or not code:
        return result
    in_code = _profile_of(_MARKUP.sub(" ", code))
    if in_code.kana or in_code.han:
        # CJK text inside code (a JSON deliverable): judge its script, not the keys and identifiers; of
        # a JSON document, only the strings that hold CJK text (a formula beside a kanji key is no prose).
        cjk_strings = _cjk_strings_of_json(code)
        if cjk_strings:
            in_code = _profile_of(cjk_strings)
        return ScriptProfile(
            in_code.primary,
            in_code.kana,
            in_code.han,
            in_code.hangul,
            chinese_clauses=in_code.chinese_clauses,
            chinese_chars=in_code.chinese_chars,
        )
    return ScriptProfile("code", words=in_code.words) if in_code.words else ScriptProfile("none")


def _cjk_strings_of_json(code: str) -> str:
    """The keys and string values of a JSON document that hold CJK text, one a line ("" if not JSON)."""
    stripped = code.strip()
    if stripped[:1] not in ("{", "["):
        return ""
    try:
        ok, document = parse_json_output(stripped)
    except ValueError:  # nested too deep to parse
        return ""
    if not ok:
        return ""
    found: list[str] = []
    pending: list[object] = [document]
    while pending:
        value = pending.pop()
        if isinstance(value, dict):
            pending.extend(value.values())
            found.extend(key for key in value if _CJK.search(key))
        elif isinstance(value, list):
            pending.extend(value)
        elif isinstance(value, str) and _CJK.search(value):
            found.append(value)
    return "\n".join(found)


def english_requested(prompt: str | None) -> bool:
    """True when the prompt asks for English (a translation, an English example): its English is wanted."""
    if prompt is None:
        return False
    # Every match holds 英 or an n (case-insensitively, n matches only n and N): most prompts hold neither,
    # and these substring tests cost a tenth of the search.
    if "英" not in prompt and "n" not in prompt and "N" not in prompt:
        return False
    return _ENGLISH_REQUEST.search(prompt) is not None


# A text one writes in a language: "英語のことわざを一つ" asks for an English proverb, where "英語の文法を説明して"
# asks for an explanation of grammar (in the contract's language).
_ARTIFACT = (
    r"(?:ことわざ|諺|表現|フレーズ|例文|文章?|タイトル|名前|詩|歌詞|スローガン|キャッチ(?:コピー|フレーズ)|メール|手紙"
    r"|単語|言い回し|慣用句|名言|格言|挨拶|見出し|ニックネーム|自己紹介|早口言葉|ジョーク)"
    r"(?![\u4E00-\u9FFF\u30A1-\u30FF])"  # the whole word: 英語の文法 and 英語の表現力 name no text
)
# The prompt asks for its answer (or a part of it) in this language: a translation into it, "in X".
# "英文" alone is not one: "次の英文を日本語に訳して" gives English to translate into Japanese.
_REQUESTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "en",
        re.compile(
            r"(?i)英語で|英語に(?:訳|翻訳|し|直)|英訳|英文で|英作文|英語の"
            + _ARTIFACT
            # an English text to write ("英文メールを書いて"); one given to translate is no request
            + r"|英文(?:の)?(?:メール|手紙|レター|カバーレター|履歴書|レジュメ|招待状|案内状?|挨拶文?)"
            r"(?:を|で)?[^。\n]{0,20}?(?:書|作|考え)" + r"|\b(?:in|into) english\b"
        ),
    ),
    (
        "zh",
        re.compile(
            r"(?i)中国語で|中国語に(?:訳|翻訳|し|直)|中訳|中文で|中国語の"
            + _ARTIFACT
            + r"|\b(?:in|into) (?:chinese|mandarin)\b"
        ),
    ),
    (
        "ko",
        re.compile(
            r"(?i)韓国語で|韓国語に(?:訳|翻訳|し|直)|韓訳|韓国語の" + _ARTIFACT + r"|\b(?:in|into) korean\b"
        ),
    ),
    ("ja", re.compile(r"(?i)日本語で|日本語に(?:訳|翻訳|し|直)|和訳|\b(?:in|into) japanese\b")),
)


@lru_cache(maxsize=1024)
def requested_languages(prompt: str | None) -> frozenset[str]:
    """The languages the prompt explicitly asks its answer to be written in ("英訳して", "in English").

    Cached: the same prompts come with every check of a stage, and four searches of each would be paid
    again per answer."""
    if not prompt:
        return frozenset()
    return frozenset(language for language, pattern in _REQUESTS if pattern.search(prompt))


#: An English answer reworks the prompt's English text when it has this many content words at least ...
_MIN_MATERIAL_WORDS = 3
#: ... and this share of them are words of that text.
_MIN_MATERIAL_SHARE = 0.6
#: Only the start of an answer is compared (the words of a long answer would cost more than they tell).
_MAX_MATERIAL_CHARS = 2000
_LATIN_WORD = re.compile(r"[A-Za-z][A-Za-z'’-]+")  # two letters at least: "A)" labels a choice
_ASCII_LETTER = re.compile("[A-Za-z]")


def _content_words(text: str) -> list[str]:
    return [
        word
        for word in (match.lower() for match in _LATIN_WORD.findall(text))
        if word not in _ENGLISH_FUNCTION_WORDS
    ]


def reworked_material(answer: str, prompt: str | None) -> frozenset[str]:
    """{"en"} when a Japanese prompt gives English text and the answer is made of its words: the sentence
    corrected, completed, quoted or answered in kind keeps the language it was given in ("次の英文の誤りを
    直して: He go to school." answered "He goes to school."). An English prompt's English is no material:
    the contract's language still holds for it."""
    if not prompt or not MARKS.may_hold(prompt, _ASCII_LETTER) or not KANA.search(prompt):
        return frozenset()
    material = set(_content_words(prompt))
    if len(material) < _MIN_MATERIAL_WORDS or profile(prompt).primary != "ja":
        return frozenset()
    words = _content_words(answer[:_MAX_MATERIAL_CHARS])
    if len(words) < _MIN_MATERIAL_WORDS:
        return frozenset()
    shared = sum(word in material for word in words)
    return frozenset({"en"}) if shared >= _MIN_MATERIAL_SHARE * len(words) else frozenset()


def language_violations(
    text: str,
    required: str,
    *,
    english_wanted: bool = False,
    requested: frozenset[str] = frozenset(),
    code_asked_for: bool = True,
) -> list[tuple[ViolationType, str]]:
    """Return the language violations of ``text`` when ``required`` is the contract's language.

    Returns (type, content-free detail) pairs: ``not_japanese`` (Japanese required, no Japanese found),
    ``wrong_language`` (other required languages), ``chinese_in_japanese``, ``broken_language_mix``.
    Empty or emoji-only text, and a deliverable that is only code or data, have none. With
    ``english_wanted`` (the prompt mentions English), whole English sentences are not a mix.
    ``requested`` (``requested_languages`` of the prompt) overrides the contract: an answer written in
    a language the question asked for has no language violation, and Chinese asked for in a Japanese
    answer is no Chinese in Japanese. ``code_asked_for`` False (the answer addresses another question)
    judges a deliverable that is only code as text: it is not code of the kind the question asked for.
    """
    found = profile(text)
    if found.primary == "code" and not code_asked_for:
        # Code the question did not ask for (an off-topic dump) is no deliverable of its kind: its text,
        # comments included, is judged as the answer's prose (DEFINITIONS.md, not_japanese).
        found = _profile_of(_strip_markup(text))
    if found.primary in ("none", "code"):
        return []
    requested = requested - {required}  # the contract's own language asked for again changes nothing
    if found.primary in requested:
        return []
    english_wanted = english_wanted or "en" in requested
    counts = f"{found.kana} kana, {found.han} han, {found.words} latin words"
    if required == "ja":
        if not found.japanese and found.primary != "ja":
            if (
                found.primary == "en"
                and (found.words >= _MIN_IDENTIFIER_WORDS or _has_code_signs(text))
                and not (found.function_words or found.han or found.hangul)
                and _PROSE_SENTENCE_END.search(text) is None
            ):
                # Latin words without one English function word (the, is, of, to ...) and without a
                # sentence's end: identifiers and keywords (an unfenced Java class, an SQL query) are no
                # prose. Prose in another Latin-script language ends sentences; a short English reply
                # ("OK", "Error: connection refused") is English all the same.
                return []
            return [(ViolationType.NOT_JAPANESE, f"primary language {found.primary}, not ja ({counts})")]
        found_violations = _japanese_violations(found, english_wanted)
        if "zh" in requested:
            return [pair for pair in found_violations if pair[0] is not ViolationType.CHINESE_IN_JAPANESE]
        return found_violations
    if required == "zh":
        # Kanji-only text without Chinese evidence profiles as ja; only kana makes it Japanese.
        if found.primary in ("en", "ko") or (found.primary == "ja" and found.kana > 0.1 * found.han):
            return [(ViolationType.WRONG_LANGUAGE, f"primary language {found.primary}, not zh ({counts})")]
        return []
    if required == "en":
        if found.primary == "en":
            return []
        if found.primary in ("ja", "zh") and (found.switches or found.english_sentences):
            return [(ViolationType.BROKEN_LANGUAGE_MIX, f"CJK text mixed with English ({counts})")]
        return [(ViolationType.WRONG_LANGUAGE, f"primary language {found.primary}, not en ({counts})")]
    if required == "ko" and found.primary != "ko":
        return [(ViolationType.WRONG_LANGUAGE, f"primary language {found.primary}, not ko ({counts})")]
    return []


def _japanese_violations(found: ScriptProfile, english_wanted: bool) -> list[tuple[ViolationType, str]]:
    violations: list[tuple[ViolationType, str]] = []
    if found.chinese_clauses:
        violations.append(
            (
                ViolationType.CHINESE_IN_JAPANESE,
                f"{found.chinese_clauses} Chinese clause(s), {found.chinese_chars} han chars, in Japanese text",
            )
        )
    sentences = 0 if english_wanted else found.english_sentences + found.short_english_sentences
    if sentences or found.switches:
        violations.append(
            (
                ViolationType.BROKEN_LANGUAGE_MIX,
                f"English inside Japanese ({sentences} English sentence(s), {found.switches} sentence(s) "
                "switching language)",
            )
        )
    elif found.hangul:
        # Japanese prose never contains Hangul outside quotes: a model slipping into Korean mid-sentence.
        violations.append(
            (ViolationType.BROKEN_LANGUAGE_MIX, f"Korean inside Japanese ({found.hangul} hangul chars)")
        )
    return violations
