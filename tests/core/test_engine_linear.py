"""No output can make the checks slow: every rule is linear in the text, whatever it repeats.

A model that loops can emit 100,000 of anything; each pattern below once made some rule rescan the
text for every occurrence (quadratic). Eight times the text must cost about eight times as much.
"""

from __future__ import annotations

import time

import pytest

from tallyspan import Contract, check
from tallyspan._contract._contracts import Claims

CONTRACT = Contract(
    language="ja",
    min_chars=10,
    required=["判定"],
    forbidden=[r"<\|im_end\|>"],
    json_schema={"type": "object"},
    claims=Claims(allowed=[]),
)
PROMPT = (
    "経済成長率と日本銀行の金融政策の関係を説明してください。消費者物価指数と失業率の例を挙げてください。"
)
UNITS = [
    "<|im_end|>", "<<SYS>>", "[", "「", '"', "'a", "<", "。", "the cat sat on a mat ", "the 猫 ", "我们认为这个",
    "です。日本の経済", " > x", "12 ", "的", "（abc", "\\(", "\\[", "$$", "$x", "```\n", "x = 1;\n", "a | b\n",
    "5% ", "<think>", "<|channel|>analysis<|message|>", "申し訳ありませんが、", "Q:\n\n",
]  # fmt: skip


def _seconds(text: str) -> float:
    best = float("inf")
    for _ in range(3):
        # This thread's CPU time, what the check costs: other processes on a busy runner do not add to it.
        start = time.thread_time()
        check(text, CONTRACT, prompt=PROMPT, other_prompts=[PROMPT[::-1]] * 3)
        best = min(best, time.thread_time() - start)
    return best


@pytest.mark.parametrize("unit", UNITS)
def test_eight_times_the_text_costs_about_eight_times_as_much(unit: str) -> None:
    small = (unit * (5_000 // len(unit) + 1))[:5_000]
    large = (unit * (40_000 // len(unit) + 1))[:40_000]
    small_cost, large_cost = _seconds(small), _seconds(large)
    assert large_cost < 24 * small_cost + 0.05, (small_cost, large_cost)  # quadratic would be 64 times
    assert large_cost < 2.0
