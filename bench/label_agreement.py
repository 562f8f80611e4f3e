"""How often the check engine gives hand-labelled real answers exactly their labels, per set and per model.

The sets (each answer read and labelled by hand against
``../shared/data/japanese-mt-bench/labels/DEFINITIONS.md``):

* ``mtbench-dev``, ``mtbench-dev2``: ``../shared/data/japanese-mt-bench/labels/`` (13 models);
* ``mtbench-dev3``: ``tests/data/japanese-mt-bench/labels-dev3.jsonl``, the five answer files there that
  had no labels (300 answers; the texts are in ``../shared/data``);
* ``elyza-nss``: ``tests/data/elyza-tasks-100-nss/labels.jsonl``, ELYZA-tasks-100 answers of 13 more models
  published by another repository (SOURCE.md there); only the labels are kept here, the texts are read from
  a clone of that repository (``--elyza-git-dir``), and the set is left out where there is none.

Every answer is checked with its own prompt and the benchmark's other prompts in flight, under the
contract its labels were written for: Japanese, at least 10 characters, no template tokens. A rule of the
engine names no row, model or question; the figures per model (and each model's set held out) say
whether a rule helps beyond the model it was written from.

Usage::

    python bench/label_agreement.py [--data ../shared/data] [--elyza-git-dir DIR] [--misses] [--json FILE]
                                    [--no-analyser] [--lomo]
"""

from __future__ import annotations

import argparse
import json
import subprocess
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tallyspan import CheckResult, Contract, check
from tallyspan._contract._contracts import NamedPattern
from tallyspan._engine import _words

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data"
LABELS = ROOT / "tests" / "data"
ELYZA_COMMIT = "75413eaad90ce47ef648f2be60960f8d2b35d88f"
ELYZA_PROMPTS = "assets/elyza_tasks_100/dataset.jsonl"

TEMPLATE_TOKENS: list[str | NamedPattern] = [r"<\|im_end\|>", r"<\|endoftext\|>", r"<\|im_start\|>", r"</s>"]
CHAT_MARKERS: list[str | NamedPattern] = [
    r"\[INST\]",
    r"\[/INST\]",
    r"<<SYS>>",
    r"### Instruction",
    r"### Response",
]
DEV_CONTRACT = Contract(language="ja", min_chars=10, forbidden=TEMPLATE_TOKENS)
CONTRACT = Contract(language="ja", min_chars=10, forbidden=TEMPLATE_TOKENS + CHAT_MARKERS)


@dataclass(frozen=True)
class Case:
    """One labelled answer with what it is checked against."""

    set: str
    id: str
    model: str
    prompt: str
    answer: str
    other_prompts: tuple[str, ...]
    labels: frozenset[str]
    contract: Contract


def _jsonl(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _mtbench(data: Path) -> Iterator[Case]:
    root = data / "japanese-mt-bench"
    questions: dict[int, str] = {}
    for name in ("question.jsonl", "question_v1.jsonl"):
        for row in _jsonl((root / name).read_text(encoding="utf-8")):
            questions.setdefault(int(row["question_id"]), row["turns"][0])
    answers: dict[tuple[str, int], str] = {}
    for path in sorted((root / "model_answer").glob("*.jsonl")):
        for row in _jsonl(path.read_text(encoding="utf-8")):
            text = row["choices"][0]["turns"][0]
            answers[(path.stem, int(row["question_id"]))] = text
            answers[(str(row["model_id"]), int(row["question_id"]))] = text
    sets = (
        ("mtbench-dev", root / "labels" / "labels-dev.jsonl", DEV_CONTRACT),
        ("mtbench-dev2", root / "labels" / "labels-dev2.jsonl", CONTRACT),
        ("mtbench-dev3", LABELS / "japanese-mt-bench" / "labels-dev3.jsonl", CONTRACT),
    )
    for name, path, contract in sets:
        for row in _jsonl(path.read_text(encoding="utf-8")):
            question = int(row["question_id"])
            answer = answers[(row["model"], question)]
            if "ASSISTANT: " in answer and answer.startswith("あなたは役立つアシスタントです。"):
                answer = answer.split("ASSISTANT: ", 1)[1]  # the echoed chat template (DEFINITIONS.md)
            others = tuple(text for other, text in questions.items() if other != question)
            yield Case(
                name,
                row["id"],
                row["model"],
                questions[question],
                answer,
                others,
                frozenset(row["labels"]),
                contract,
            )


def _git_show(git_dir: Path, path: str) -> str:
    shown = subprocess.run(
        ["git", f"--git-dir={git_dir}", "show", f"{ELYZA_COMMIT}:{path}"], check=True, capture_output=True
    )
    return shown.stdout.decode("utf-8")


def _elyza(git_dir: Path) -> Iterator[Case]:
    prompts = [row["input_text"] for row in _jsonl(_git_show(git_dir, ELYZA_PROMPTS))]
    answers: dict[str, list[str]] = {}
    for row in _jsonl((LABELS / "elyza-tasks-100-nss" / "labels.jsonl").read_text(encoding="utf-8")):
        path = row["path"]
        if path not in answers:
            answers[path] = [line["pred"] for line in _jsonl(_git_show(git_dir, path))]
        index = int(row["prompt_id"]) - 1
        yield Case(
            "elyza-nss",
            row["id"],
            row["model"],
            prompts[index],
            answers[path][index],
            tuple(prompts[:index] + prompts[index + 1 :]),
            frozenset(row["labels"]),
            CONTRACT,
        )


def load_cases(data: Path, elyza_git_dir: Path | None) -> list[Case]:
    """Every labelled answer whose texts are here."""
    cases = list(_mtbench(data))
    if elyza_git_dir is not None and elyza_git_dir.exists():
        cases += list(_elyza(elyza_git_dir))
    return cases


def judge(case: Case) -> CheckResult:
    return check(case.answer, case.contract, prompt=case.prompt, other_prompts=list(case.other_prompts))


@dataclass
class Tally:
    exact: int = 0
    total: int = 0

    @property
    def share(self) -> float:
        return self.exact / self.total if self.total else 1.0


def type_counts(results: Sequence[tuple[Case, frozenset[str]]]) -> dict[str, Counter[str]]:
    """True positives, false positives and false negatives per violation type."""
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    for case, got in results:
        for kind in case.labels | got:
            if kind in case.labels and kind in got:
                counts[kind]["tp"] += 1
            elif kind in got:
                counts[kind]["fp"] += 1
            else:
                counts[kind]["fn"] += 1
    return counts


def _ratio(part: int, whole: int) -> str:
    return f"{part / whole:.2f}" if whole else "-"


def report(results: Sequence[tuple[Case, frozenset[str]]], misses: bool) -> dict[str, Any]:
    by_set: dict[str, Tally] = defaultdict(Tally)
    by_model: dict[tuple[str, str], Tally] = defaultdict(Tally)
    for case, got in results:
        hit = int(case.labels == got)
        for tally in (by_set[case.set], by_set["all"], by_model[(case.set, case.model)]):
            tally.exact += hit
            tally.total += 1
    print("| set | answers | exact |\n|---|---|---|")
    for name, tally in by_set.items():
        print(f"| {name} | {tally.total} | {tally.share:.1%} |")
    print("\n| set | model | answers | exact | the set without this model |\n|---|---|---|---|---|")
    for (name, model), tally in sorted(by_model.items()):
        rest = by_set[name]
        others = Tally(rest.exact - tally.exact, rest.total - tally.total)
        print(f"| {name} | {model} | {tally.total} | {tally.share:.1%} | {others.share:.1%} |")
    counts = type_counts(results)
    print("\n| type | labelled | tp | fp | fn | precision | recall |\n|---|---|---|---|---|---|---|")
    for kind, count in sorted(counts.items()):
        labelled = count["tp"] + count["fn"]
        print(
            f"| {kind} | {labelled} | {count['tp']} | {count['fp']} | {count['fn']} | "
            f"{_ratio(count['tp'], count['tp'] + count['fp'])} | {_ratio(count['tp'], labelled)} |"
        )
    if misses:
        print()
        for case, got in results:
            if case.labels != got:
                print(f"{case.id}: labelled {sorted(case.labels)}, got {sorted(got)}")
    return {
        "sets": {name: [tally.exact, tally.total] for name, tally in by_set.items()},
        "models": {f"{name}/{model}": [t.exact, t.total] for (name, model), t in by_model.items()},
        "types": {kind: dict(count) for kind, count in counts.items()},
    }


#: The off_topic rule's two thresholds, and the values leave-one-model-out chooses among.
LOMO_GRID: dict[str, tuple[float, ...]] = {
    "_MIN_MARGIN": (0.0, 0.25, 0.5, 0.75, 1.0),
    "_MIN_RANK": (0.3, 0.4, 0.5, 0.6),
    "_MIN_UNRELATED_CHARS": (150, 300, 500),
}


@dataclass(frozen=True)
class HeldOut:
    """One model's exact verdicts at the fixed thresholds and at those chosen on the other models."""

    set: str
    model: str
    answers: int
    at_fixed: int
    held_out: int
    chosen: tuple[Any, ...]


def verdicts_by_point(
    cases: Sequence[Case], grid: dict[str, tuple[Any, ...]]
) -> dict[tuple[Any, ...], list[frozenset[str]]]:
    """The violation types each case gets at each point of ``grid`` (names of ``_relevance`` and values)."""
    from itertools import product

    from tallyspan._engine import _relevance

    defaults = {name: getattr(_relevance, name) for name in grid}
    verdicts: dict[tuple[Any, ...], list[frozenset[str]]] = {}
    try:
        for point in product(*grid.values()):
            for name, value in zip(grid, point, strict=True):
                setattr(_relevance, name, value)
            verdicts[point] = [frozenset(judge(case).violation_types) for case in cases]
    finally:
        for name, value in defaults.items():
            setattr(_relevance, name, value)
    return verdicts


def held_out_figures(
    cases: Sequence[Case],
    verdicts: dict[tuple[Any, ...], list[frozenset[str]]] | None = None,
    fixed: tuple[Any, ...] | None = None,
) -> list[HeldOut]:
    """For each model: the point (of ``LOMO_GRID``, or of ``verdicts``') that gives the other models' answers
    the most exact verdicts, then that model's exact verdicts with it and with ``fixed`` (the engine's
    thresholds by default)."""
    from tallyspan._engine import _relevance

    if verdicts is None:
        verdicts = verdicts_by_point(cases, LOMO_GRID)
    if fixed is None:
        fixed = tuple(getattr(_relevance, name) for name in LOMO_GRID)
    exact = {
        point: [case.labels == got for case, got in zip(cases, row, strict=True)]
        for point, row in verdicts.items()
    }
    alerts = {point: ["off_topic" in got for got in row] for point, row in verdicts.items()}
    figures = []
    for model in sorted({(case.set, case.model) for case in cases}):
        mine = [index for index, case in enumerate(cases) if (case.set, case.model) == model]
        rest = [index for index, case in enumerate(cases) if (case.set, case.model) != model]
        # Of points that do equally well on the other models, the one that raises the fewest alerts
        # there: a tie says the other models cannot tell them apart, and precision comes first. (Preferring
        # the fixed thresholds on a tie would credit the held-out model with what was chosen on its rows.)
        best = max(
            exact,
            key=lambda point: (
                sum(exact[point][i] for i in rest),
                -sum(alerts[point][i] for i in rest),
                point == fixed,
            ),
        )
        figures.append(
            HeldOut(
                model[0],
                model[1],
                len(mine),
                sum(exact[fixed][i] for i in mine),
                sum(exact[best][i] for i in mine),
                best,
            )
        )
    return figures


def leave_one_model_out(cases: Sequence[Case]) -> None:
    """Print each model's exact share at the fixed thresholds beside the one held out (``held_out_figures``)."""
    figures = held_out_figures(cases)
    print("\n| set | model | answers | exact, fixed thresholds | exact, held out | chosen on the others |")
    print("|---|---|---|---|---|---|")
    for row in figures:
        chosen = ", ".join(
            f"{name.strip('_').lower()} {value:g}" for name, value in zip(LOMO_GRID, row.chosen, strict=True)
        )
        print(
            f"| {row.set} | {row.model} | {row.answers} | {row.at_fixed / row.answers:.1%} "
            f"| {row.held_out / row.answers:.1%} | {chosen} |"
        )
    total = sum(row.answers for row in figures)
    fixed_total = sum(row.at_fixed for row in figures)
    held_total = sum(row.held_out for row in figures)
    print(f"\nall: fixed thresholds {fixed_total / total:.1%}, leave-one-model-out {held_total / total:.1%}")


#: Where ``fetch`` leaves the clone of the ELYZA answers' repository on these machines.
DEFAULT_ELYZA_GIT_DIR = Path("/work/.mirror/Northern-System-Service+gpt4-autoeval/repo")


def add_source_arguments(parser: argparse.ArgumentParser) -> None:
    """``--data`` and ``--elyza-git-dir``: where the labelled answers' texts are (``load_cases``)."""
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument(
        "--elyza-git-dir",
        type=Path,
        default=DEFAULT_ELYZA_GIT_DIR,
        help="a clone (git directory) of the repository SOURCE.md names; the set is left out without it",
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_source_arguments(parser)
    parser.add_argument("--misses", action="store_true", help="list every answer not given its labels")
    parser.add_argument("--json", type=Path, help="write the figures to this file too")
    parser.add_argument(
        "--lomo", action="store_true", help="leave one model out: thresholds chosen on the other models"
    )
    parser.add_argument(
        "--no-analyser", action="store_true", help="judge as without tallyspan[ja] (bigrams for words)"
    )
    args = parser.parse_args(argv)
    if args.no_analyser:
        _words._missing = True  # what an install without the analyser sees
    print(f"morphological analyser: {'on' if _words.analyser_available() else 'off'}\n")
    cases = load_cases(args.data, args.elyza_git_dir)
    results = [(case, frozenset(judge(case).violation_types)) for case in cases]
    figures = report(results, args.misses)
    if args.lomo:
        leave_one_model_out(cases)
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
