"""The check engine on real answers of five models to Japanese MT-Bench, labelled by hand case by case.

Data: ../shared/data/japanese-mt-bench (see its SOURCE.md): 60 Japanese prompts, real answers of
Qwen-14B-Chat, chatntq-nekomata-14b, gpt-4-1106-preview, shisa-bad-7b-v1 and Swallow-7b-instruct.

The contract is what a team would write for these stages: Japanese answers (the extraction stage asks
for JSON/CSV, so it has no language rule), not empty, no chat-template tokens, no refusal, no leaked
reasoning. Each label below was decided by reading the answer:

- ``DEV``: the answers read while the rules were written (117). They must all match exactly.
- ``HELD_OUT``: answers labelled from the text alone, before the engine was run on them (73). The
  first run missed three broken mixes (an English intro over a Japanese list, Korean inside Japanese)
  and two rules were added for them; the last disagreement (shisa/55: English framing around a quoted
  Japanese translation, labelled a mix, found not_japanese) went when not_japanese came to mean "no
  kana in the prose" (japanese-mt-bench/labels/DEFINITIONS.md).

Labels the written definitions (DEFINITIONS.md) decide differently from when these were labelled:
shisa/30 (English list ending in a Japanese paragraph) has kana, so it is a broken mix, not
not_japanese; nekomata/53, 59, 65 and shisa/54 loop (77-100 % of the text is one unit repeated back to
back), so they are degenerate_repetition too, a type that did not exist then; qwen/45 says the name
cannot be inferred and gives no answer, which the definitions call a refusal (it was "a wrong answer").
No prompt is given here, so off_topic is not judged (test_mtbench_dev_labels.py judges it).

Label codes: F forbidden_present, CJ chinese_in_japanese, NJ not_japanese, BM broken_language_mix,
R refusal, S too_short, DR degenerate_repetition, "" clean.
"""

from __future__ import annotations

import json
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from tallyspan import Contract, check

pytestmark = pytest.mark.data

MODELS = {
    "qwen": "Qwen-14B-Chat",
    "shisa": "shisa-bad-7b-v1",
    "nekomata": "chatntq-nekomata-14b",
    "gpt4": "gpt-4-1106-preview",
    "swallow": "tokyotech-llm_Swallow-7b-instruct-hf",
}
CODES = {
    "F": "forbidden_present",
    "CJ": "chinese_in_japanese",
    "NJ": "not_japanese",
    "BM": "broken_language_mix",
    "R": "refusal",
    "S": "too_short",
    "DR": "degenerate_repetition",
}
TEMPLATE_TOKENS = (
    r"<\|(?:im_end|im_start|endoftext|extra_\d+)\|>|<</?SYS>>|\[/?INST\]|</s>|### (?:Human|Assistant)"
)
_COMMON: dict[str, Any] = {
    "min_chars": 1,
    "forbidden": [{"name": "template token", "pattern": TEMPLATE_TOKENS}],
}
ANSWER_CONTRACT = Contract(language="ja", **_COMMON)
EXTRACTION_CONTRACT = Contract(**_COMMON)

# fmt: off
DEV: dict[str, dict[tuple[int, int], str]] = {
    # Qwen: <|im_end|> leaks into nearly every answer; Chinese words inside Japanese (市场, 筷子, 宫崎骏/價值/首先,
    # 結肠炎, 三磷酸腺苷, 氧化剤, 就是一个..., 桥梁, 响き, 确か/见つめ/精进, 来临); 42 declines as "a computer program";
    # 41 disclaims, then answers (not a refusal); 45 says the name cannot be inferred (a refusal: it says it cannot);
    # 55 quotes the Chinese poem it was asked about (normal); 59 uses Chinese commas (，) in Japanese (not a clause).
    "qwen": {(21, 0): "F", (22, 0): "F", (23, 0): "CJ F", (24, 0): "F", (25, 0): "F", (26, 0): "", (27, 0): "F",
             (28, 0): "F", (29, 0): "CJ F", (30, 0): "F", (41, 0): "F", (42, 0): "F R", (43, 0): "F", (44, 0): "F",
             (45, 0): "F R", (46, 0): "F", (47, 0): "F", (48, 0): "F", (49, 0): "F", (50, 0): "F", (51, 0): "CJ F",
             (52, 0): "F", (53, 0): "CJ F", (54, 0): "F", (55, 0): "F", (56, 0): "F", (57, 0): "F", (58, 0): "F",
             (59, 0): "F", (60, 0): "F", (63, 0): "CJ F", (65, 0): "CJ F", (66, 0): "CJ", (67, 0): "CJ F",
             (76, 0): "CJ F", (78, 0): "CJ F", (79, 0): "CJ F"},
    # shisa: answers in English (29 has two glossed kanji words: no kana, not Japanese; 30 ends with a Japanese
    # paragraph: kana, so a broken mix);
    # <|extra_30|> tokens; 42 "I'm sorry, I don't know anything about that" declines.
    "shisa": {(21, 0): "", (22, 0): "F NJ", (23, 0): "", (24, 0): "F NJ", (25, 0): "F NJ", (26, 0): "F NJ",
              (27, 0): "NJ", (28, 0): "F NJ", (29, 0): "F NJ", (30, 0): "BM", (41, 0): "NJ", (42, 0): "NJ R",
              (43, 0): "NJ", (44, 0): "", (45, 0): "NJ", (46, 0): "NJ", (47, 0): "NJ", (48, 0): "", (49, 0): "NJ",
              (50, 0): "F NJ"},
    # nekomata: empty answers, and <<SYS>>/[/INST] debris (some answers are nothing but the system prompt echoed);
    # 53 loops on "[<</SYS>>]", 59 on the prompt it echoes.
    "nekomata": {(41, 0): "S", (42, 0): "S", (43, 0): "F", (44, 0): "S", (45, 0): "S", (46, 0): "S", (47, 0): "S",
                 (48, 0): "F", (49, 0): "F", (50, 0): "F", (51, 0): "F", (52, 0): "F", (53, 0): "F DR", (54, 0): "F",
                 (55, 0): "S", (56, 0): "F", (57, 0): "S", (58, 0): "F", (59, 0): "F DR", (60, 0): "F"},
    # gpt-4: clean Japanese, both turns; 42/1 opens with 申し訳ありませんが but answers (not a refusal).
    "gpt4": {(q, t): "" for q in range(41, 51) for t in (0, 1)},
    # Swallow: short but clean Japanese (73 "vs PS5" is a normal symbol, 75 "180cm" a unit).
    "swallow": {(q, 0): "" for q in range(61, 81)},
}
HELD_OUT: dict[str, dict[tuple[int, int], str]] = {
    # shisa: 52 is an English intro over a quoted Japanese list and 55 an English frame around a Japanese
    # translation (both broken mixes); 54 and 57 are English non-answers; 59 declines ("I don't understand").
    "shisa": {(51, 0): "", (52, 0): "BM", (53, 0): "NJ", (54, 0): "NJ DR", (55, 0): "BM", (56, 0): "", (57, 0): "NJ",
              (58, 0): "", (59, 0): "NJ R", (60, 0): "F NJ", (61, 0): "F NJ", (62, 0): "NJ", (63, 0): "NJ",
              (64, 0): "NJ", (65, 0): "NJ", (66, 0): "F NJ", (67, 0): "F NJ", (68, 0): "NJ", (69, 0): "F NJ",
              (70, 0): "NJ", (71, 0): "", (72, 0): "", (73, 0): "NJ", (74, 0): "NJ", (75, 0): "NJ", (76, 0): "",
              (77, 0): "F NJ", (78, 0): "NJ", (79, 0): "NJ", (80, 0): "NJ"},
    # nekomata: 76 refuses the writing task ("...描写することはできません。なぜなら...").
    "nekomata": {(61, 0): "F", (62, 0): "S", (63, 0): "F", (64, 0): "F", (65, 0): "F DR", (66, 0): "F", (67, 0): "F",
                 (68, 0): "F", (69, 0): "F", (70, 0): "F", (71, 0): "F", (72, 0): "F", (73, 0): "F", (74, 0): "S",
                 (75, 0): "F", (76, 0): "F R", (77, 0): "S", (78, 0): "F", (79, 0): "F", (80, 0): "S"},
    # Qwen: 74 slips into Korean mid-sentence (お話した적이 있습니다よね) without a template token.
    "qwen": {(61, 0): "F", (62, 0): "F", (64, 0): "F", (68, 0): "F", (69, 0): "F", (70, 0): "F", (71, 0): "F",
             (72, 0): "F", (73, 0): "F", (74, 0): "BM", (75, 0): "F", (77, 0): "F", (80, 0): "F"},
    # gpt-4: clean; 51/58/60 open with a disclaimer and then answer in full.
    "gpt4": {(q, 0): "" for q in range(51, 61)},
}
# fmt: on


@cache
def _answers(data: Path, model: str) -> dict[int, list[str]]:
    path = data / "japanese-mt-bench" / "model_answer" / f"{model}.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return {row["question_id"]: row["choices"][0]["turns"] for row in rows}


@cache
def _categories(data: Path) -> dict[int, str]:
    path = data / "japanese-mt-bench" / "question.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return {row["question_id"]: row["category"] for row in rows}


def _results(
    data: Path, labels: dict[str, dict[tuple[int, int], str]]
) -> list[tuple[str, set[str], set[str]]]:
    rows = []
    for short, cases in labels.items():
        answers = _answers(data, MODELS[short])
        for (question, turn), codes in cases.items():
            extraction = _categories(data)[question] == "extraction"
            result = check(answers[question][turn], EXTRACTION_CONTRACT if extraction else ANSWER_CONTRACT)
            expected = {CODES[code] for code in codes.split()}
            rows.append((f"{short}/{question}/{turn}", expected, set(result.violation_types)))
    return rows


def precision_recall(rows: list[tuple[str, set[str], set[str]]]) -> dict[str, tuple[int, int, int]]:
    """Per type: (true positives, false positives, false negatives)."""
    counts: dict[str, Counter[str]] = {}
    for _, expected, got in rows:
        for violation_type in expected | got:
            tally = counts.setdefault(violation_type, Counter())
            if violation_type in expected and violation_type in got:
                tally["tp"] += 1
            elif violation_type in got:
                tally["fp"] += 1
            else:
                tally["fn"] += 1
    return {name: (tally["tp"], tally["fp"], tally["fn"]) for name, tally in sorted(counts.items())}


def test_the_label_sets_are_large_and_mixed() -> None:
    dev = sum(len(cases) for cases in DEV.values())
    held_out = sum(len(cases) for cases in HELD_OUT.values())
    assert (dev, held_out) == (117, 73)
    every = [codes for cases in (*DEV.values(), *HELD_OUT.values()) for codes in cases.values()]
    assert sum(codes == "" for codes in every) >= 60  # clean answers, the hard negatives
    assert sum(codes != "" for codes in every) >= 60


def test_every_dev_answer_gets_exactly_its_labels(shared_data: Path) -> None:
    wrong = [
        (case, sorted(expected), sorted(got))
        for case, expected, got in _results(shared_data, DEV)
        if expected != got
    ]
    assert wrong == []


def test_held_out_answers_meet_the_precision_and_recall_floor(shared_data: Path) -> None:
    rows = _results(shared_data, HELD_OUT)
    exact = sum(expected == got for _, expected, got in rows)
    misses = [(case, sorted(e), sorted(g)) for case, e, g in rows if e != g]
    assert misses == []
    assert exact == 73
    assert precision_recall(rows) == {
        "broken_language_mix": (3, 0, 0),
        "degenerate_repetition": (2, 0, 0),
        "forbidden_present": (34, 0, 0),
        "not_japanese": (22, 0, 0),
        "refusal": (2, 0, 0),
        "too_short": (4, 0, 0),
    }


def test_clean_answers_stay_clean_on_both_sets(shared_data: Path) -> None:
    rows = _results(shared_data, DEV) + _results(shared_data, HELD_OUT)
    false_alarms = [case for case, expected, got in rows if not expected and got]
    assert false_alarms == []
