"""off_topic's word weights compared: rarity among the prompts in flight (the engine's) against general
rarity in Japanese (wordfreq) and their combinations.

The engine weighs each content word of a prompt by how rare it is among the prompts in flight
(``_relevance._rarity``: log((n + 1) / (count + 0.5))). The alternatives weigh it by its general
frequency, wordfreq's zipf (log10 of the frequency per 10⁹ words), taken as the most frequent of the
word's written forms (the lemma, the surface, the reading in either kana: UniDic writes こと as 事 and
それぞれ as 其々, whose own frequencies are far lower):

* ``global C``: max(0, C - zipf): words more common than zipf C weigh nothing;
* ``information``: 9 - zipf, the word's information in log10 units;
* ``in-flight x global C``, ``in-flight x information``: the products;
* ``smoothed``: the in-flight document frequency shrunk towards a prior from the general frequency,
  -log((count + m * min(1, k * frequency) + 0.5) / (n + m + 1)).

Per weighting: exact share and off_topic precision/recall per set; the answers whose verdict changes
against the engine's, counted per model; how well the margin (the own prompt's coverage in standard
deviations above the other prompts') separates the labelled off_topic answers from the others (AUC,
and the clean answers nearest the threshold); and leave-one-model-out over ``LOMO_GRID``, with the
weighting fixed and with the weighting itself one more choice of the grid (``--lomo``, minutes).

Needs fugashi with unidic-lite (``tallyspan[ja]``) and wordfreq; skipped without them.

Usage::

    python bench/compare_word_weights.py [--data ../shared/data] [--elyza-git-dir DIR] [--lomo]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import label_agreement as bench

from tallyspan._engine import _relevance, _words

Rarity = Callable[[Sequence[frozenset[str]]], dict[str, float]]
_KATAKANA = {code: code - 0x60 for code in range(ord("ァ"), ord("ヶ") + 1)}


class Forms:
    """The written forms of each content word the engine finds (lemma, surface, readings)."""

    def __init__(self) -> None:
        self.forms: dict[str, set[str]] = defaultdict(set)

    def add(self, text: str) -> None:
        tagger = _words._tagger()
        assert tagger is not None
        for line in tagger.parse(text[: _words._MAX_CHARS]).splitlines():  # type: ignore[attr-defined]
            fields = line.split("\t")
            if len(fields) < 5:
                continue
            lemma = fields[3] or fields[0]
            head, dash, source = lemma.rpartition("-")
            word = lemma
            if dash and source.isascii() and source.isalpha():
                word = source  # the engine's word for a loanword: its source word (_words)
                self.forms[word.lower()].add(head)
            self.forms[word.lower()].update({lemma, fields[0], fields[2], fields[2].translate(_KATAKANA)})


def weightings(forms: Forms) -> dict[str, Rarity]:
    import wordfreq  # type: ignore[import-untyped, unused-ignore]

    frequency = wordfreq.get_frequency_dict("ja")
    zipf_cache: dict[str, float] = {}

    def zipf(word: str) -> float:
        if word not in zipf_cache:
            best = max(
                (frequency.get(form, 0.0) for form in forms.forms.get(word, set()) | {word}), default=0.0
            )
            zipf_cache[word] = math.log10(best) + 9 if best > 0 else 0.0
        return zipf_cache[word]

    in_flight = _relevance._rarity

    def of(weight: Callable[[str, float, int, int], float]) -> Rarity:
        def rarity(vocabularies: Sequence[frozenset[str]]) -> dict[str, float]:
            counts = Counter(word for vocabulary in vocabularies for word in vocabulary)
            flight = in_flight(vocabularies)
            return {
                word: weight(word, flight[word], count, len(vocabularies)) for word, count in counts.items()
            }

        return rarity

    def smoothed(k: float, m: float) -> Rarity:
        def weight(word: str, _: float, count: int, n: int) -> float:
            prior = min(1.0, k * 10 ** (zipf(word) - 9)) if zipf(word) > 0 else 0.0
            return -math.log((count + m * prior + 0.5) / (n + m + 1))

        return of(weight)

    found: dict[str, Rarity] = {"in-flight (engine)": in_flight}
    for cut in (6.0, 6.5, 7.0):
        found[f"global {cut:g}"] = of(lambda word, _, __, ___, cut=cut: max(0.0, cut - zipf(word)))
    found["information"] = of(lambda word, _, __, ___: 9 - zipf(word))
    found["in-flight x global 6.5"] = of(lambda word, flight, __, ___: flight * max(0.0, 6.5 - zipf(word)))
    found["in-flight x information"] = of(lambda word, flight, __, ___: flight * (9 - zipf(word)))
    found["smoothed k100 m20"] = smoothed(100, 20)
    return found


def margins(cases: Sequence[bench.Case], rarity: Rarity) -> list[tuple[bench.Case, float]]:
    """Each answer the margin test judges (``_unrelated_words``' conditions) with its margin in deviations."""
    rule = _relevance
    found = []
    for case in cases:
        answer, topic = rule._answer(case.answer), rule._topic(case.prompt)
        if answer.script == "en" or answer.script != topic.script:
            continue
        own = rule._prompt_words(case.prompt)
        if len(own) < rule._MIN_PROMPT_WORDS or not own & answer.words:
            continue
        if len(answer.text) < rule._MIN_UNRELATED_CHARS:
            continue
        vocabularies = [own]
        for index in rule._distinct_others(case.prompt, case.other_prompts):
            vocabulary = rule._prompt_words(case.other_prompts[index])
            if len(vocabulary) >= rule._MIN_PROMPT_WORDS:
                vocabularies.append(vocabulary)
        if len(vocabularies) <= rule._MIN_RANKED_PROMPTS:
            continue
        weights = rarity(vocabularies)
        coverage = rule._covered(own, answer.words, weights)
        others = [rule._covered(vocabulary, answer.words, weights) for vocabulary in vocabularies[1:]]
        mean = statistics.fmean(others)
        deviation = statistics.pstdev(others, mean)
        found.append((case, (coverage - mean) / deviation if deviation else math.inf))
    return found


def separation(cases: Sequence[bench.Case], rarity: Rarity) -> str:
    scored = margins(cases, rarity)
    off = [margin for case, margin in scored if "off_topic" in case.labels]
    clean = sorted(margin for case, margin in scored if "off_topic" not in case.labels)
    auc = sum((c > o) + 0.5 * (c == o) for o in off for c in clean) / (len(off) * len(clean))
    below = ", ".join(
        f"<{t:g}: {sum(m < t for m in off)}/{sum(m < t for m in clean)}" for t in (0.5, 1.0, 1.5)
    )
    return f"{auc:.3f} | {below} | {', '.join(f'{m:.2f}' for m in clean[:4])}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    bench.add_source_arguments(parser)
    parser.add_argument("--lomo", action="store_true", help="leave one model out as well (several minutes)")
    args = parser.parse_args(argv)
    try:
        import wordfreq  # type: ignore[import-untyped, unused-ignore]  # noqa: F401
    except ImportError:
        print("wordfreq is not installed: nothing to compare")
        return 0
    if not _words.analyser_available():
        print("fugashi with unidic-lite (tallyspan[ja]) is not installed: nothing to compare")
        return 0
    cases = bench.load_cases(args.data, args.elyza_git_dir)
    forms = Forms()
    for prompt in {case.prompt for case in cases} | {other for case in cases for other in case.other_prompts}:
        forms.add(prompt)
    found = weightings(forms)
    sets = [*sorted({case.set for case in cases}), "all"]
    engine = _relevance._rarity
    verdicts: dict[str, list[frozenset[str]]] = {}
    print("exact share and off_topic precision/recall per set; separation by the margin: AUC, labelled")
    print("off_topic/clean answers below each margin, the four lowest margins of clean answers\n")
    print("| weighting | " + " | ".join(sets) + " | AUC | below | lowest clean |")
    print("|---|" + "---|" * (len(sets) + 3))
    try:
        for name, rarity in found.items():
            _relevance._rarity = rarity  # type: ignore[assignment]
            verdicts[name] = [frozenset(bench.judge(case).violation_types) for case in cases]
            cells = []
            for part in sets:
                mine = [
                    (case, got)
                    for case, got in zip(cases, verdicts[name], strict=True)
                    if part in {case.set, "all"}
                ]
                count = bench.type_counts(mine)["off_topic"]
                exact = sum(case.labels == got for case, got in mine) / len(mine)
                predicted, labelled = count["tp"] + count["fp"], count["tp"] + count["fn"]
                cells.append(
                    f"{exact:.1%} {count['tp'] / predicted if predicted else 1:.2f}/"
                    f"{count['tp'] / labelled if labelled else 1:.2f}"
                )
            print(f"| {name} | " + " | ".join(cells) + f" | {separation(cases, rarity)} |")
    finally:
        _relevance._rarity = engine  # type: ignore[assignment]
    base = verdicts["in-flight (engine)"]
    print(
        "\nanswers given their exact labels (+) or no longer (-) against the engine's weighting, per model:\n"
    )
    for name, got in verdicts.items():
        per_model: dict[str, Counter[str]] = defaultdict(Counter)
        for case, before, after in zip(cases, base, got, strict=True):
            change = (case.labels == after) - (case.labels == before)
            if change:
                per_model[case.model]["+" if change > 0 else "-"] += 1
        changes = ", ".join(
            f"{model} +{count['+']}/-{count['-']}" for model, count in sorted(per_model.items())
        )
        print(f"- {name}: {changes or 'none'}")
    if args.lomo:
        grid = {"_rarity": tuple(found.values()), **bench.LOMO_GRID}
        verdicts_at = bench.verdicts_by_point(cases, grid)
        defaults = tuple(getattr(_relevance, name) for name in bench.LOMO_GRID)
        print("\nleave-one-model-out exact share (thresholds chosen on the other models), per set:\n")
        print("| weighting | " + " | ".join(sets) + " |\n|---|" + "---|" * len(sets))
        for rarity_name, rarity in [*found.items(), ("chosen too", None)]:
            points = {
                point: row for point, row in verdicts_at.items() if rarity is None or point[0] is rarity
            }
            figures = bench.held_out_figures(cases, points, (engine if rarity is None else rarity, *defaults))
            held: dict[str, list[int]] = defaultdict(lambda: [0, 0])
            for row in figures:
                for part in (row.set, "all"):
                    held[part][0] += row.held_out
                    held[part][1] += row.answers
            print(f"| {rarity_name} | " + " | ".join(f"{held[s][0] / held[s][1]:.1%}" for s in sets) + " |")
            if rarity is None:
                names = {id(value): key for key, value in found.items()}
                chosen = Counter(names[id(row.chosen[0])] for row in figures)
                print(f"\nweighting chosen for the held-out models: {dict(chosen)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
