"""What every tallyspan instrumentor shares through ``TallyspanInstrumentor``: the ``capture_content`` rule.

One rule, resolved in one place for all six: a bad argument raises ``ConfigError`` before anything is
patched; a bad ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` value warns and leaves content off.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from importlib.metadata import entry_points
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider

from tallyspan import ConfigError
from tallyspan_instrumentors._base import TallyspanInstrumentor

ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
OURS = sorted(
    (
        entry_point
        for entry_point in entry_points(group="opentelemetry_instrumentor")
        if entry_point.value.startswith("tallyspan_instrumentors")
    ),
    key=lambda entry_point: entry_point.name,
)


@pytest.fixture(params=OURS, ids=lambda entry_point: entry_point.name)
def instrumentor(request: pytest.FixtureRequest) -> Iterator[TallyspanInstrumentor[Any]]:
    """Each of our entry points' instrumentors, uninstrumented after the test."""
    made = request.param.load()()
    yield made
    if made.is_instrumented_by_opentelemetry:
        made.uninstrument()


def test_every_entry_point_is_a_tallyspan_instrumentor() -> None:
    assert len(OURS) == 6
    assert all(issubclass(entry_point.load(), TallyspanInstrumentor) for entry_point in OURS)


@pytest.mark.parametrize("bad", ["yes", 1, 0, "true"])
def test_a_bad_capture_content_argument_raises_before_anything_is_patched(
    instrumentor: TallyspanInstrumentor[Any], tracer_provider: TracerProvider, bad: object
) -> None:
    with pytest.raises(ConfigError, match="capture_content must be a bool or None"):
        instrumentor.instrument(tracer_provider=tracer_provider, capture_content=bad)
    assert not instrumentor.is_instrumented_by_opentelemetry
    assert instrumentor.capture_content is None
    instrumentor.instrument(tracer_provider=tracer_provider, capture_content=True)  # a good one still works
    assert instrumentor.capture_content is True


@pytest.mark.parametrize(
    ("env", "argument", "expected"), [("true", None, True), ("true", False, False), ("", None, False)]
)
def test_the_argument_wins_over_the_environment(
    instrumentor: TallyspanInstrumentor[Any],
    tracer_provider: TracerProvider,
    monkeypatch: pytest.MonkeyPatch,
    env: str,
    argument: bool | None,
    expected: bool,
) -> None:
    monkeypatch.setenv(ENV, env)
    instrumentor.instrument(tracer_provider=tracer_provider, capture_content=argument)
    assert instrumentor.capture_content is expected
    instrumentor.uninstrument()
    assert instrumentor.capture_content is None


def test_a_bad_environment_value_warns_and_leaves_content_off(
    instrumentor: TallyspanInstrumentor[Any],
    tracer_provider: TracerProvider,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv(ENV, "maybe")
    with caplog.at_level(logging.WARNING):
        instrumentor.instrument(tracer_provider=tracer_provider)
    assert instrumentor.capture_content is False
    assert [record.getMessage() for record in caplog.records] == [
        f"{ENV}='maybe' is not a boolean; message content is not captured"
    ]
