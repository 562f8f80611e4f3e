"""Script analysis for the language checks: Japanese, Chinese, English and Korean by Unicode rules.

General language-ID libraries label kanji-only Japanese lines (headings, verdicts) as Chinese, so we
decide from scripts instead:

- kana (and the Japanese-only iteration mark 々) is Japanese evidence;
- a clause without kana is Chinese only when it carries Chinese evidence: Chinese-only characters
  (``_hanzi_table``, generated from the codecs) or Chinese function words (我, 了, 是, 的 ...) that are
  not part of a Japanese compound (完了, 現在, 目的 ...); a kanji-only clause without either is Japanese;
- code blocks, inline code, URLs and quoted terms (「...」, "...") are set aside: they are normal in any
  language; loanwords, product names and acronyms are names, not English prose;
- English mixed into Japanese grammar (function words, several ordinary lowercase words) is a broken mix.

Everything here is a pure function of the text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tallyspan._hanzi_table import CHINESE_ONLY, RARE_IN_JAPANESE
from tallyspan._taxonomy import ViolationType

__all__ = ["SUPPORTED_LANGUAGES", "ScriptProfile", "language_violations", "profile"]

#: Languages a contract may require.
SUPPORTED_LANGUAGES = frozenset({"ja", "en", "zh", "ko"})

_CODE_FENCE = re.compile(r"(?ms)^[ \t]*(```|~~~)[^\n]*\n.*?(?:^[ \t]*\1[ \t]*$|\Z)")
_INLINE_CODE = re.compile(r"`[^`\n]+`")
_URL = re.compile(r"(?i)\b(?:https?://|www\.)\S+|\b[\w.+-]+@[\w-]+\.[\w.-]+")
# Latin-only parentheses after a term are glosses: 基準率の無視（base rate neglect）, CO₂(g).
_GLOSS = re.compile(
    r"[（(][^（）()\n\u3400-\u4DBF\u4E00-\u9FFF\uF900-\uFAFF\u3041-\u309F\u30A1-\u30FF\u31F0-\u31FF\uFF66-\uFF9D]{1,80}[）)]"
)
# TeX math: \[...\], \(...\), $$...$$, $...$ and \commands.
_MATH = re.compile(r"(?s)\\\[.*?\\\]|\\\(.*?\\\)|\$\$.*?\$\$|\$[^$\n]{1,200}\$|\\[A-Za-z]+")
# Chat-template and markup tokens (<|im_end|>, <<SYS>>, </s>) are not words of any language.
_MARKUP = re.compile(r"<\|[^|<>\n]{1,40}\|>|<<?/?[A-Za-z_]{1,20}>>?")
_QUOTED = re.compile(r"「[^」\n]{0,200}」|『[^』\n]{0,200}』|\"[^\"\n]{0,200}\"|“[^”\n]{0,200}”")

_KANA = re.compile(r"[\u3041-\u309F\u30A1-\u30FA\u30FD-\u30FF\u31F0-\u31FF\uFF66-\uFF9D々〆]")
_HAN = re.compile(r"[\u3400-\u4DBF\u4E00-\u9FFF\uF900-\uFAFF]")
_HANGUL = re.compile(r"[\uAC00-\uD7AF\u1100-\u11FF\u3130-\u318F]")
_LATIN_TOKEN = re.compile(r"(?<![\\^_])[A-Za-z][A-Za-z0-9]*(?:['’._/+^-][A-Za-z0-9]+)*")
_ARTICLE_A = re.compile(r"\ba(?= [a-z]{2,})")
_CLAUSE_SPLIT = re.compile(r"[。！？!?\n、，,；;：:]")

# English words that carry grammar; two of them inside Japanese text make a broken mix.
_ENGLISH_FUNCTION_WORDS_TEXT = (
    "a an the is are was were be been being am to of in on at for with from by and or but not no this "
    "that these those it its we you they he she i me my our your their them us will would can could "
    "should shall may might must do does did have has had as if so then than there here what which "
    "who whom how why when where about into just also very some any all more most please thank thanks "
    "let need needs"
)
_ENGLISH_FUNCTION_WORDS = frozenset(_ENGLISH_FUNCTION_WORDS_TEXT.split())
# Lowercase abbreviations that Japanese text uses as symbols.
_NOT_WORDS = frozenset({"vs", "etc", "ok", "eg", "ie", "aka", "approx", "max", "min", "ex", "no", "ca"})
#: Share of a Japanese text's prose in whole English sentence lines that makes it a broken mix.
_ENGLISH_LINES_SHARE = 0.15

# Japanese compounds that contain a character Chinese uses as a function word; removed before scoring.
_JAPANESE_COMPOUNDS = re.compile(
    "完了|終了|修了|満了|魅了|了解|了承|校了|未了|投了|読了|了知|"
    "現在|存在|在庫|在住|在籍|在宅|滞在|所在|不在|健在|潜在|実在|駐在|混在|点在|散在|介在|内在|自在|在留|在任|在外|"
    "是非|是正|国是|社是|"
    "目的|的確|的中|標的|端的|射的|"
    "請求|申請|要請|請負|請願|普請|招請|懇請|強請|勧請|請来|請託|起請"
)
# Chinese function characters (outside the compounds above) and their weight in a kana-less clause.
_CHINESE_FUNCTION_CHARS = {
    "我": 1,
    "你": 1,
    "這": 1,
    "嗎": 1,
    "呢": 1,
    "吧": 1,
    "很": 1,
    "是": 1,
    "了": 1,
    "在": 1,
    "也": 1,
    "請": 1,
}
_CHINESE_BIGRAMS = re.compile("可以|但是|所以|如果|任何|如有|已經|沒有|什麼|怎麼|一個")
_CHINESE_CLAUSE_SCORE = 2
_NOT_LETTERS = re.compile(r"[\W\d_]+")
# A Chinese-only character run followed by a gloss is a name: 华为（ファーウェイ）.
_GLOSSED_NAME = re.compile(r"[\u3400-\u4DBF\u4E00-\u9FFF\uF900-\uFAFF]+(?=[（(])")
#: Prose with quotes set aside is judged alone only when it holds this share of the text's letters.
_UNQUOTED_MIN_SHARE = 0.3
#: A Japanese-looking text mostly made of whole English sentence lines is English.
_ENGLISH_PRIMARY_SHARE = 0.6


@dataclass(frozen=True)
class ScriptProfile:
    """What a text is made of, outside code, URLs and quotes (``prose``)."""

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
    """Lowercase English words that are not names, acronyms or identifiers."""
    chinese_clauses: int = 0
    """Clauses without kana that carry Chinese evidence."""
    chinese_chars: int = 0
    """Han characters in those clauses."""
    english_line_share: float = 0.0
    """Share of the prose in lines that are whole English sentences."""


def _strip_code(text: str) -> tuple[str, str]:
    code_parts: list[str] = []

    def keep(match: re.Match[str]) -> str:
        code_parts.append(match.group(0))
        return "\n"

    prose = _CODE_FENCE.sub(keep, text)
    prose = _INLINE_CODE.sub(keep, prose)
    return prose, "\n".join(code_parts)


def _chinese_score(clause: str) -> int:
    """Chinese evidence in a clause without kana: Chinese-only characters weigh 2, weaker signs 1."""
    score = 0
    for char in clause:
        if char in CHINESE_ONLY:
            score += 2
        elif char in RARE_IN_JAPANESE:
            score += 1
    if score >= _CHINESE_CLAUSE_SCORE:
        return score
    score += 2 * len(_CHINESE_BIGRAMS.findall(clause))
    rest = _JAPANESE_COMPOUNDS.sub("\u3000", clause)
    for index, char in enumerate(rest):
        weight = _CHINESE_FUNCTION_CHARS.get(char)
        if weight:
            score += weight
        elif char == "的":
            # Japanese 的 is a suffix followed by kana (的な, 的に); Chinese 的 ends a phrase or links nouns.
            following = rest[index + 1 : index + 2]
            if not following or _HAN.match(following) or not following.strip():
                score += 1
    return score


def _word_kinds(prose: str) -> tuple[int, int, int]:
    words = function = ordinary = 0
    for token in _LATIN_TOKEN.findall(prose):
        lower = token.lower()
        if len(token) == 1 and token != "I":
            continue  # single letters are labels and variables (A社, aとb); the article is counted below
        words += 1
        if lower in _ENGLISH_FUNCTION_WORDS and token in (lower, lower.capitalize()):
            function += 1
            ordinary += token == lower
            continue
        if len(token) < 2 or not token.isalpha():
            continue  # labels (A社), versions, identifiers (asyncio.gather), hyphenated terms
        if token == lower and lower not in _NOT_WORDS:
            ordinary += 1
    articles = len(_ARTICLE_A.findall(prose))
    return words + articles, function + articles, ordinary + articles


def _profile_of(prose: str) -> ScriptProfile:
    kana = len(_KANA.findall(prose))
    han = len(_HAN.findall(prose))
    hangul = len(_HANGUL.findall(prose))
    words = function = ordinary = 0
    english_line_chars = 0
    for line in prose.splitlines():
        line_words, line_function, line_ordinary = _word_kinds(line)
        words += line_words
        if _KANA.search(line) or _HAN.search(line):
            # English grammar counts where it is interleaved with Japanese, not in formula or code lines.
            function += line_function
            ordinary += line_ordinary
        elif line_words >= 6 and line_function >= 2:
            english_line_chars += len(line.strip())
    chinese_clauses = chinese_chars = total_score = 0
    if han:
        # Chinese-only characters are rare in Japanese: look for them once, per clause only if present.
        has_chinese_only = not CHINESE_ONLY.isdisjoint(prose)
        for clause in _CLAUSE_SPLIT.split(prose):
            if _KANA.search(clause):
                if has_chinese_only:
                    # A Chinese-only character form inside a Japanese clause (結肠炎) is contamination too.
                    found = sum(char in CHINESE_ONLY for char in _GLOSSED_NAME.sub("", clause))
                    if found:
                        chinese_clauses += 1
                        chinese_chars += found
                continue
            clause_han = len(_HAN.findall(clause))
            if not clause_han:
                continue
            score = _chinese_score(clause)
            total_score += score
            if score >= _CHINESE_CLAUSE_SCORE or (not kana and score):
                chinese_clauses += 1
                chinese_chars += clause_han
    cjk = kana + han
    if hangul and hangul >= cjk:
        primary = "ko"
    elif not cjk and not words:
        primary = "none"
    elif cjk * 0.5 < 0.1 * words:
        primary = "en"  # a stray kanji in English prose does not make it Japanese
    elif english_line_chars >= _ENGLISH_PRIMARY_SHARE * len("".join(prose.split())):
        primary = "en"  # English sentences with a Japanese line or two
    elif not kana:
        primary = "zh" if total_score else "ja"  # kanji-only without Chinese evidence is Japanese
    elif chinese_chars > 0.7 * cjk and kana < 0.05 * cjk:
        primary = "zh"
    else:
        primary = "ja"
    prose_chars = len("".join(prose.split())) or 1
    return ScriptProfile(
        primary,
        kana,
        han,
        hangul,
        words,
        function,
        ordinary,
        chinese_clauses,
        chinese_chars,
        english_line_share=round(english_line_chars / prose_chars, 3),
    )


def _letters(text: str) -> int:
    return len(_NOT_LETTERS.sub("", text))


def profile(text: str) -> ScriptProfile:
    """Profile ``text``: its primary script and the counts the language checks use.

    Prose is the text without code, URLs and quotes; when it has no letters, quotes count, and when
    only code has letters the primary is ``code`` (or ``ja``/``zh`` when the code holds CJK text).
    """
    prose, code = _strip_code(text)
    # Cheap substring tests first: most outputs have no URL, TeX or markup to set aside.
    if "://" in prose or "www." in prose or "@" in prose:
        prose = _URL.sub(" ", prose)
    if "\\" in prose or "$" in prose:
        prose = _MATH.sub(" ", prose)
    if "<" in prose:
        prose = _MARKUP.sub(" ", prose)
    unquoted = _GLOSS.sub(" ", _QUOTED.sub(" ", prose))
    result = _profile_of(unquoted)
    if result.primary != "none" and (
        len(unquoted) == len(prose) or _letters(unquoted) >= _UNQUOTED_MIN_SHARE * _letters(prose)
    ):
        return result
    result = _profile_of(prose)  # mostly quoted text: judge the quotes too
    if result.primary != "none" or not code:
        return result
    in_code = _profile_of(_MARKUP.sub(" ", code))
    if in_code.kana or in_code.han:
        # CJK text inside code (a JSON deliverable): judge its script, not the keys and identifiers.
        return ScriptProfile(
            in_code.primary,
            in_code.kana,
            in_code.han,
            in_code.hangul,
            chinese_clauses=in_code.chinese_clauses,
            chinese_chars=in_code.chinese_chars,
        )
    return ScriptProfile("code", words=in_code.words) if in_code.words else in_code


def _is_mixed(found: ScriptProfile) -> bool:
    """English grammar inside CJK text: two function words, three ordinary lowercase words, or whole
    English sentence lines making up a good part of the text."""
    return (
        found.function_words >= 2
        or found.ordinary_words >= 3
        or found.english_line_share >= _ENGLISH_LINES_SHARE
    )


def language_violations(text: str, required: str) -> list[tuple[ViolationType, str]]:
    """Return the language violations of ``text`` when ``required`` is the contract's language.

    Returns (type, content-free detail) pairs: ``not_japanese`` (Japanese required, another language
    found), ``wrong_language`` (other required languages), ``chinese_in_japanese``,
    ``broken_language_mix``. Empty or emoji-only text has none (that is too_short's job).
    """
    found = profile(text)
    if found.primary == "none":
        return []
    counts = f"{found.kana} kana, {found.han} han, {found.words} latin words"
    if required == "ja":
        if found.primary in ("en", "zh", "ko", "code"):
            return [(ViolationType.NOT_JAPANESE, f"primary language {found.primary}, not ja ({counts})")]
        violations: list[tuple[ViolationType, str]] = []
        if found.chinese_clauses:
            violations.append(
                (
                    ViolationType.CHINESE_IN_JAPANESE,
                    f"{found.chinese_clauses} Chinese clause(s), {found.chinese_chars} han chars, in Japanese text",
                )
            )
        if _is_mixed(found):
            violations.append(
                (
                    ViolationType.BROKEN_LANGUAGE_MIX,
                    f"English inside Japanese ({found.function_words} function words, "
                    f"{found.ordinary_words} ordinary words)",
                )
            )
        elif found.hangul:
            # Japanese prose never contains Hangul outside quotes: a model slipping into Korean mid-sentence.
            violations.append(
                (ViolationType.BROKEN_LANGUAGE_MIX, f"Korean inside Japanese ({found.hangul} hangul chars)")
            )
        return violations
    if required == "zh":
        # Kanji-only text without Chinese evidence profiles as ja; only kana makes it Japanese.
        if found.primary in ("en", "ko", "code") or (found.primary == "ja" and found.kana > 0.1 * found.han):
            return [(ViolationType.WRONG_LANGUAGE, f"primary language {found.primary}, not zh ({counts})")]
        return []
    if required == "en":
        if found.primary == "en":
            return []
        if found.primary in ("ja", "zh") and _is_mixed(found):
            return [(ViolationType.BROKEN_LANGUAGE_MIX, f"CJK text mixed with English ({counts})")]
        return [(ViolationType.WRONG_LANGUAGE, f"primary language {found.primary}, not en ({counts})")]
    if required == "ko" and found.primary != "ko":
        return [(ViolationType.WRONG_LANGUAGE, f"primary language {found.primary}, not ko ({counts})")]
    return []
