"""What every tallyspan instrumentor shares through ``TallyspanInstrumentor``: the ``capture_content`` rule,
and OpenTelemetry's ``BaseInstrumentor`` protocol.

One rule, resolved in one place for all six: a bad argument raises ``ConfigError`` before anything is
patched; a bad ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` value warns and leaves content off.

The base does not derive from ``BaseInstrumentor`` (importing it costs about 15 ms of startup) but
behaves as it does: one instance per class, instrumented once, the dependency check with its two
options, the same log messages; and it is a virtual subclass as soon as that module is imported.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.instrumentation.dependencies import DependencyConflictError
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor
from opentelemetry.sdk.trace import TracerProvider

from tallyspan import ConfigError
from tallyspan_instrumentors._base import TallyspanInstrumentor, WrapperState

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


class _Missing(TallyspanInstrumentor[WrapperState]):
    """An instrumentor of a library that is not installed."""

    _instruments = ("tallyspan-no-such-library >= 1.0",)
    _state_type = WrapperState


class _OutOfRange(TallyspanInstrumentor[WrapperState]):
    """An instrumentor of a version of OpenAI that does not exist."""

    _instruments = ("openai >= 999",)
    _state_type = WrapperState


@pytest.fixture
def missing() -> Iterator[_Missing]:
    made = _Missing()
    yield made
    if made.is_instrumented_by_opentelemetry:
        made.uninstrument()


def test_every_instrumentor_is_a_base_instrumentor(instrumentor: TallyspanInstrumentor[Any]) -> None:
    assert isinstance(instrumentor, BaseInstrumentor)
    assert issubclass(_Missing, BaseInstrumentor)


def test_it_becomes_a_base_instrumentor_when_opentelemetry_s_module_is_imported() -> None:
    code = textwrap.dedent(
        """
        import sys
        from tallyspan_instrumentors.openai import OpenAIInstrumentor

        print("opentelemetry.instrumentation.instrumentor" in sys.modules)
        from opentelemetry.instrumentation.instrumentor import BaseInstrumentor

        print(isinstance(OpenAIInstrumentor(), BaseInstrumentor), issubclass(OpenAIInstrumentor, BaseInstrumentor))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["False", "True True"]


def test_one_instance_per_class(instrumentor: TallyspanInstrumentor[Any]) -> None:
    assert type(instrumentor)() is instrumentor
    assert _Missing() is _Missing()
    assert type(_OutOfRange()) is _OutOfRange  # not the instance of another class


def test_instrumented_once_and_uninstrumented_once(
    instrumentor: TallyspanInstrumentor[Any],
    tracer_provider: TracerProvider,
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert not instrumentor.is_instrumented_by_opentelemetry
    with caplog.at_level(logging.WARNING):
        assert instrumentor.instrument(tracer_provider=tracer_provider, capture_content=True) is None
        assert instrumentor.is_instrumented_by_opentelemetry
        instrumentor.instrument(tracer_provider=tracer_provider, capture_content=False)
        assert instrumentor.capture_content is True  # the second call changed nothing
        assert instrumentor.uninstrument() is None
        assert not instrumentor.is_instrumented_by_opentelemetry
        instrumentor.uninstrument()
    assert [(record.name, record.getMessage()) for record in caplog.records] == [
        ("opentelemetry.instrumentation.instrumentor", "Attempting to instrument while already instrumented"),
        (
            "opentelemetry.instrumentation.instrumentor",
            "Attempting to uninstrument while already uninstrumented",
        ),
    ]


def test_a_missing_library_is_logged_and_not_instrumented(
    missing: _Missing, tracer_provider: TracerProvider, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR):
        assert missing.instrument(tracer_provider=tracer_provider) is None
    assert not missing.is_instrumented_by_opentelemetry
    assert missing.capture_content is None
    assert [record.getMessage() for record in caplog.records] == [
        '_Missing only instruments "tallyspan-no-such-library >= 1.0", but no installed version was found, '
        "so nothing can be instrumented."
    ]


def test_a_version_out_of_range_is_logged_with_the_version_found(
    tracer_provider: TracerProvider, caplog: pytest.LogCaptureFixture
) -> None:
    from importlib.metadata import version

    with caplog.at_level(logging.ERROR):
        _OutOfRange().instrument(tracer_provider=tracer_provider)
    assert not _OutOfRange().is_instrumented_by_opentelemetry
    assert [record.getMessage() for record in caplog.records] == [
        f'_OutOfRange only instruments "openai >= 999", but currently installed version '
        f'("openai {version("openai")}") falls outside of that range, so nothing can be instrumented.'
    ]


def test_a_conflict_raises_when_asked_to(missing: _Missing, tracer_provider: TracerProvider) -> None:
    with pytest.raises(DependencyConflictError) as raised:
        missing.instrument(tracer_provider=tracer_provider, raise_exception_on_conflict=True)
    assert raised.value.conflict.required == "tallyspan-no-such-library >= 1.0"
    assert raised.value.conflict.found is None
    assert not missing.is_instrumented_by_opentelemetry


def test_skip_dep_check_instruments_without_asking(
    missing: _Missing, tracer_provider: TracerProvider
) -> None:
    missing.instrument(tracer_provider=tracer_provider, skip_dep_check=True)
    assert missing.is_instrumented_by_opentelemetry
    assert missing.capture_content is False
    missing.uninstrument()
    assert not missing.is_instrumented_by_opentelemetry


def test_the_dependency_check_is_packaging_s_verdict(instrumentor: TallyspanInstrumentor[Any]) -> None:
    from opentelemetry.instrumentation.dependencies import get_dependency_conflicts

    assert instrumentor._check_dependency_conflicts() is None
    assert get_dependency_conflicts(instrumentor.instrumentation_dependencies()) is None
    conflict = _Missing()._check_dependency_conflicts()
    assert conflict is not None
    assert conflict.required == "tallyspan-no-such-library >= 1.0"


def test_instrumentation_is_off_exactly_when_opentelemetry_says_it_is() -> None:
    from opentelemetry import context
    from opentelemetry.instrumentation import utils

    from tallyspan_instrumentors._calls import is_instrumentation_enabled

    assert is_instrumentation_enabled() is utils.is_instrumentation_enabled() is True
    with utils.suppress_instrumentation():
        assert is_instrumentation_enabled() is utils.is_instrumentation_enabled() is False
    for key in (context._SUPPRESS_INSTRUMENTATION_KEY, utils._SUPPRESS_INSTRUMENTATION_KEY_PLAIN):
        token = context.attach(context.set_value(key, True))
        try:
            assert is_instrumentation_enabled() is utils.is_instrumentation_enabled() is False
        finally:
            context.detach(token)
    assert is_instrumentation_enabled() is True


def test_each_instrumentor_declares_the_floor_of_its_extra() -> None:
    """``_instruments`` (what the instrumentor refuses below, at run time) says what pyproject's extra
    installs: a floor raised in one place only would instrument what the other says does not work."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:
        import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]
    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text("utf-8"))
    extras = pyproject["project"]["optional-dependencies"]
    floors = {
        requirement.split(">=")[0].strip(): requirement.split(">=")[1].strip()
        for name in ("openai", "anthropic", "ollama", "mcp", "openai-agents", "langchain")
        for requirement in extras[name]
    }
    for entry_point in entry_points(group="opentelemetry_instrumentor"):
        if not entry_point.value.startswith("tallyspan_instrumentors"):
            continue
        for requirement in entry_point.load()._instruments:
            library, floor = (part.strip() for part in requirement.split(">="))
            assert floors[library] == floor, (entry_point.name, requirement, floors[library])
