"""The Japanese morphological analysers compared as the source of off_topic's content words.

Each analyser gives the same words (``tallyspan._engine._words``'s definition): the lemma of a noun, verb,
adjective or adjectival noun, without numbers, counters, pronouns and words that only support others;
a verb or adjective of one character does not count. Per analyser:

* the verdicts on every labelled answer (``bench/label_agreement.py``'s sets): exact share per set,
  off_topic precision and recall per set, and leave-one-model-out over ``LOMO_GRID``;
* the cost: load time (import and first tagger, in a fresh interpreter), microseconds per 1,000
  characters of answer (the window the rule reads, uncached), and the installed size of its packages.

An analyser that is not installed is skipped. The engine's own words (fugashi with unidic-lite) are
``fugashi``; ``none`` is the engine without an analyser (kanji/katakana bigrams and Latin words).

Usage::

    pip install sudachipy sudachidict_core janome      # the ones to compare beside tallyspan[ja]
    python bench/compare_analysers.py [--data ../shared/data] [--elyza-git-dir DIR] [--no-lomo]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import label_agreement as bench

from tallyspan._engine import _relevance, _words

Words = Callable[[str], frozenset[str] | None]

#: The verbs and adjectives UniDic calls 非自立可能 (they may support another word) and IPADIC calls
#: 自立: left out for Janome, so that all three give the same words.
_SUPPORTING = frozenset({
    "する", "ある", "いる", "なる", "できる", "くる", "来る", "いく", "行く", "見る", "みる", "おく", "置く", "しまう",
    "くださる", "下さる", "くれる", "もらう", "貰う", "あげる", "いただく", "ない", "無い", "いい", "よい", "良い",
    "ほしい", "欲しい",
})  # fmt: skip
#: UniDic's parts of speech (pos1, and pos2 excluded), as in ``_words``: Sudachi's are UniDic's.
_UNIDIC_CONTENT = frozenset({"名詞", "動詞", "形容詞", "形状詞"})
_UNIDIC_FUNCTION = frozenset({"数詞", "助数詞", "非自立可能", "代名詞"})


def _keep(lemma: str, noun: bool, into: set[str]) -> None:
    if noun or len(lemma) >= 2:
        into.add(lemma.lower())


def fugashi_words() -> Words:
    """The engine's own: fugashi with unidic-lite."""
    if not _words.analyser_available():
        raise ImportError("fugashi or unidic-lite")
    return _words.content_words.__wrapped__  # type: ignore[attr-defined, no-any-return]


def sudachi_words(mode: str) -> Words:
    """SudachiPy with sudachidict_core; the lemma is Sudachi's normalised form (UniDic's lemma)."""
    from sudachipy import Dictionary, SplitMode  # type: ignore[import-not-found, unused-ignore]

    tokenizer = Dictionary(dict="core").tokenizer(getattr(SplitMode, mode))

    def words(text: str) -> frozenset[str]:
        found: set[str] = set()
        for morpheme in tokenizer.tokenize(text[: _words._MAX_CHARS]):
            pos = morpheme.part_of_speech()
            if pos[0] not in _UNIDIC_CONTENT or pos[1] in _UNIDIC_FUNCTION:
                continue
            _keep(morpheme.normalized_form(), pos[0] == "名詞", found)
        return frozenset(found)

    return words


def janome_words() -> Words:
    """Janome with its IPADIC: nouns but numbers, pronouns, suffixes (counters) and dependent nouns;
    independent verbs and adjectives (but ``_SUPPORTING``); the lemma is the base form."""
    from janome.tokenizer import Tokenizer  # type: ignore[import-not-found, unused-ignore]

    tokenizer = Tokenizer()

    def words(text: str) -> frozenset[str]:
        found: set[str] = set()
        for token in tokenizer.tokenize(text[: _words._MAX_CHARS]):
            pos = token.part_of_speech.split(",")
            lemma = token.base_form if token.base_form != "*" else token.surface
            if pos[0] == "名詞":
                if pos[1] in {"数", "代名詞", "非自立", "接尾"}:
                    continue
            elif pos[0] not in {"動詞", "形容詞"} or pos[1] != "自立" or lemma in _SUPPORTING:
                continue
            _keep(lemma, pos[0] == "名詞", found)
        return frozenset(found)

    return words


#: name: (the words, its distributions, the code that loads it in a fresh interpreter)
ANALYSERS: dict[str, tuple[Callable[[], Words], tuple[str, ...], str]] = {
    "fugashi+unidic-lite": (
        fugashi_words,
        ("fugashi", "unidic-lite"),
        "import fugashi; fugashi.Tagger().parse('桜')",
    ),
    "sudachipy+core (A)": (
        lambda: sudachi_words("A"),
        ("sudachipy", "sudachidict-core"),
        "from sudachipy import Dictionary; Dictionary(dict='core').tokenizer().tokenize('桜')",
    ),
    "sudachipy+core (C)": (
        lambda: sudachi_words("C"),
        ("sudachipy", "sudachidict-core"),
        "from sudachipy import Dictionary; Dictionary(dict='core').tokenizer().tokenize('桜')",
    ),
    "janome": (
        janome_words,
        ("janome",),
        "from janome.tokenizer import Tokenizer; list(Tokenizer().tokenize('桜'))",
    ),
}


def installed_mb(distributions: Sequence[str]) -> float:
    total = 0
    for name in distributions:
        for file in importlib.metadata.distribution(name).files or ():
            path = Path(str(file.locate()))
            if path.is_file():
                total += path.stat().st_size
    return total / 1e6


def load_seconds(code: str) -> float:
    """Import and first parse, in a fresh interpreter (best of three)."""
    timed = f"import time; t = time.perf_counter(); {code}; print(time.perf_counter() - t)"
    return min(
        float(
            subprocess.run([sys.executable, "-c", timed], check=True, capture_output=True, text=True).stdout
        )
        for _ in range(3)
    )


def us_per_1000_chars(words: Words, texts: Sequence[str]) -> float:
    """Median over three passes of every text, uncached."""
    chars = sum(len(text) for text in texts)
    passes = []
    for _ in range(3):
        start = time.perf_counter()
        for text in texts:
            words(text)
        passes.append(time.perf_counter() - start)
    return statistics.median(passes) / chars * 1e9


def use(words: Words | None) -> None:
    """Make ``words`` the engine's content words (None: as without an analyser)."""
    cached = lru_cache(maxsize=None)(words) if words is not None else (lambda text: None)
    _relevance.content_words = cached  # type: ignore[assignment]
    _relevance._answer.cache_clear()


def agreement(cases: Sequence[bench.Case], lomo: bool) -> dict[str, str]:
    results = [(case, frozenset(bench.judge(case).violation_types)) for case in cases]
    row = {}
    for part in [*sorted({case.set for case in cases}), "all"]:
        mine = [(case, got) for case, got in results if part in {case.set, "all"}]
        count = bench.type_counts(mine)["off_topic"]
        exact = sum(case.labels == got for case, got in mine) / len(mine)
        precision = count["tp"] / (count["tp"] + count["fp"]) if count["tp"] + count["fp"] else 1.0
        recall = count["tp"] / (count["tp"] + count["fn"]) if count["tp"] + count["fn"] else 1.0
        row[part] = f"{exact:.1%} {precision:.2f}/{recall:.2f}"
    if lomo:
        figures = bench.held_out_figures(cases)
        row["lomo"] = f"{sum(f.held_out for f in figures) / sum(f.answers for f in figures):.1%}"
    return row


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    bench.add_source_arguments(parser)
    parser.add_argument("--no-lomo", action="store_true", help="skip leave-one-model-out (36 runs a set)")
    args = parser.parse_args(argv)
    cases = bench.load_cases(args.data, args.elyza_git_dir)
    texts = sorted({_relevance._first_turn(case.answer) for case in cases})
    sets = [*sorted({case.set for case in cases}), "all", *([] if args.no_lomo else ["lomo"])]
    original = _relevance.content_words
    print("exact share, off_topic precision/recall, per set; leave-one-model-out exact over all sets\n")
    print("| analyser | " + " | ".join(sets) + " | µs / 1,000 chars | load s | installed MB |")
    print("|---|" + "---|" * (len(sets) + 3))
    try:
        use(None)
        row = agreement(cases, not args.no_lomo)
        print("| none (bigrams) | " + " | ".join(row[part] for part in sets) + " | - | - | - |")
        for name, (make, distributions, load) in ANALYSERS.items():
            try:
                words = make()
            except ImportError as error:
                print(f"| {name} | not installed ({error}) |")
                continue
            cost = us_per_1000_chars(words, texts)
            use(words)
            row = agreement(cases, not args.no_lomo)
            print(
                f"| {name} | "
                + " | ".join(row[part] for part in sets)
                + f" | {cost:,.0f} | {load_seconds(load):.2f} | {installed_mb(distributions):.0f} |"
            )
    finally:
        _relevance.content_words = original
        _relevance._answer.cache_clear()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
