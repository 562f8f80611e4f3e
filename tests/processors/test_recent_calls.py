"""The checks processor's memory of recent model calls, against the plain scan it replaces."""

from __future__ import annotations

import random

import pytest

from tallyspan_processors._checks import _Call, _RecentCalls

_PROMPTS = ("東京の人口は？", "東京の人口は？ ", "大阪の天気は？", "京都の寺は？", "名古屋の城は？")
_OUTPUTS = ("人口は増えています。", "晴れです。", "金閣寺です。")
_STAGES = (None, "research", "report")


def _call(rng: random.Random, now: int) -> _Call:
    prompt = rng.choice(_PROMPTS)
    output = rng.choice(_OUTPUTS)
    start = now - rng.randrange(0, 50)
    return _Call(
        start=start,
        end=start + rng.randrange(1, 60),  # ends out of the order the calls arrive in
        stage=rng.choice(_STAGES),
        prompt=prompt,
        prompt_key=prompt.strip(),
        output=output,
        output_key=hash(output.strip()),
    )


def _in_flight_by_scan(calls: list[_Call], start: int, end: int, prompt_key: str) -> set[str]:
    return {
        call.prompt
        for call in calls
        if call.start < end and start < call.end and call.prompt_key != prompt_key
    }


def _same_answer_by_scan(calls: list[_Call], probe: _Call) -> set[tuple[str, str]]:
    return {
        (call.prompt, call.output)
        for call in calls
        if call.output_key == probe.output_key
        and call.stage == probe.stage
        and call.prompt_key != probe.prompt_key
    }


@pytest.mark.parametrize("size", [1, 2, 7, 64])
@pytest.mark.parametrize("seed", range(5))
def test_it_answers_as_a_scan_of_the_last_calls_would(size: int, seed: int) -> None:
    rng = random.Random(seed)
    recent = _RecentCalls(size)
    remembered: list[_Call] = []
    for sequence in range(400):
        probe = _call(rng, now=sequence * 10)
        window = remembered[-size:]
        in_flight = recent.in_flight(probe.start, probe.end, probe.prompt_key)
        assert len(in_flight) == len(set(in_flight))  # each other question once
        assert set(in_flight) == _in_flight_by_scan(window, probe.start, probe.end, probe.prompt_key)
        same = recent.same_answer(probe.output_key, probe.stage, probe.prompt_key)
        assert {prompt.strip() for prompt, _ in same} == {
            prompt.strip() for prompt, _ in _same_answer_by_scan(window, probe)
        }
        assert set(same) <= _same_answer_by_scan(window, probe)
        recent.add(probe)
        remembered.append(probe)
    # Nothing outlives the window: the indexes hold exactly the last ``size`` calls.
    assert len(recent._ended) == min(size, len(remembered))
    assert sum(entry[0] for prompts in recent._by_answer.values() for entry in prompts.values()) == min(
        size, len(remembered)
    )


def test_a_memory_of_no_calls_remembers_nothing() -> None:
    recent = _RecentCalls(0)
    call = _Call(0, 10, None, "質問", "質問", "答え", hash("答え"))
    recent.add(call)
    assert recent.in_flight(0, 10, "別の質問") == []
    assert recent.same_answer(call.output_key, None, "別の質問") == []


def test_calls_that_ended_at_the_same_time_are_each_forgotten_in_turn() -> None:
    recent = _RecentCalls(2)
    first = _Call(0, 10, None, "一", "一", "答え", hash("答え"))
    second = _Call(5, 10, None, "二", "二", "答え", hash("答え"))
    third = _Call(20, 30, None, "三", "三", "別", hash("別"))
    for call in (first, second, third):
        recent.add(call)
    assert recent.in_flight(9, 25, "四") == [
        "二",
        "三",
    ]  # the first, though it ended with the second, is gone
    assert recent.same_answer(hash("答え"), None, "四") == [("二", "答え")]
