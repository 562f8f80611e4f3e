"""tallyspan.stage(): a context manager and decorator over contextvars."""

from __future__ import annotations

import asyncio

import pytest

import tallyspan


def test_context_manager_sets_and_restores_the_stage() -> None:
    assert tallyspan.current_stage() is None
    with tallyspan.stage("report", enqueued_at=12.5) as info:
        assert info == tallyspan.StageInfo("report", 12.5)
        assert tallyspan.current_stage() == info
        with tallyspan.stage("inner"):
            assert tallyspan.current_stage() == tallyspan.StageInfo("inner")
        assert tallyspan.current_stage() == info
    assert tallyspan.current_stage() is None


def test_decorator_applies_to_sync_functions_and_keeps_their_metadata() -> None:
    @tallyspan.stage("triage")
    def triage(ticket: str) -> str | None:
        """Triage a ticket."""
        stage = tallyspan.current_stage()
        return stage.name if stage else None

    assert triage("t-1") == "triage"
    assert triage.__name__ == "triage"
    assert triage.__doc__ == "Triage a ticket."
    assert tallyspan.current_stage() is None


def test_decorator_applies_to_coroutines_per_task() -> None:
    @tallyspan.stage("a")
    async def in_a() -> str | None:
        await asyncio.sleep(0)
        stage = tallyspan.current_stage()
        return stage.name if stage else None

    @tallyspan.stage("b")
    async def in_b() -> str | None:
        await asyncio.sleep(0)
        stage = tallyspan.current_stage()
        return stage.name if stage else None

    async def both() -> list[str | None]:
        return list(await asyncio.gather(in_a(), in_b()))

    assert asyncio.run(both()) == ["a", "b"]


def test_stage_is_restored_when_the_body_raises() -> None:
    with pytest.raises(RuntimeError), tallyspan.stage("x"):
        raise RuntimeError("boom")
    assert tallyspan.current_stage() is None


def test_an_empty_stage_name_is_refused() -> None:
    with pytest.raises(TypeError, match="non-empty"):
        tallyspan.stage("")
