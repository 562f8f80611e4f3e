"""Patching on the app's import (``_post_import``): hooks of undone instrumentations leave nothing behind,
a library imported after many instrument/uninstrument cycles is patched once, and a patch that fails in
the app's import is counted instead of failing the import."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

import tallyspan
from tallyspan_instrumentors._post_import import PatchSet, pending_hooks


def test_undone_instrumentations_leave_no_hook_or_state_behind() -> None:
    # A fresh interpreter: the libraries must not be imported yet, and wrapt's registry starts empty.
    code = textwrap.dedent(
        """
        import gc, sys
        from opentelemetry.sdk.trace import TracerProvider
        from wrapt import importer
        from tallyspan_instrumentors._post_import import pending_hooks
        from tallyspan_instrumentors.langchain import LangChainInstrumentor
        from tallyspan_instrumentors.openai import OpenAIInstrumentor

        CHAT_MODELS = "langchain_core.language_models.chat_models"
        assert CHAT_MODELS not in sys.modules and "openai.resources.chat" not in sys.modules
        provider = TracerProvider(shutdown_on_exit=False)
        state_types = set()
        for _ in range(25):
            for instrumentor_type in (LangChainInstrumentor, OpenAIInstrumentor):
                instrumentor = instrumentor_type()
                instrumentor.instrument(tracer_provider=provider)
                state_types.add(type(instrumentor._state))  # what each wrapper holds: tracer, settings
                instrumentor.uninstrument()
                del instrumentor
        gc.collect()
        waiting = {name: len(hooks) for name, hooks in importer._post_import_hooks.items()}
        assert waiting[CHAT_MODELS] == 1 and waiting["openai.resources.chat"] == 1, waiting
        assert pending_hooks(CHAT_MODELS) == 0 and pending_hooks("openai.resources.chat") == 0
        alive = sum(type(item) in state_types for item in gc.get_objects())
        assert alive == 0, f"the states of {alive} undone instrumentations are still alive"

        instrumentor = LangChainInstrumentor()
        instrumentor.instrument(tracer_provider=TracerProvider(shutdown_on_exit=False))
        assert pending_hooks(CHAT_MODELS) > 0
        from langchain_core.language_models.chat_models import BaseChatModel
        wrapper = BaseChatModel.__dict__["_generate_with_cache"]
        assert not hasattr(wrapper.__wrapped__, "__wrapped__"), "patched more than once"
        assert pending_hooks(CHAT_MODELS) == 0
        assert instrumentor.handler is not None
        instrumentor.uninstrument()
        assert not hasattr(BaseChatModel._generate_with_cache, "__wrapped__")
        print("ok")
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


@pytest.fixture
def module_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def _write_module(directory: Path, name: str) -> None:
    (directory / f"{name}.py").write_text("def greet():\n    return 'hello'\n")


def test_a_failing_patch_is_counted_and_the_import_goes_on(module_dir: Path) -> None:
    name = "tallyspan_test_failing_patch_target"
    _write_module(module_dir, name)
    before = tallyspan.stats().get("errors.instrument.patch", 0)
    ran: list[str] = []

    def failing(module: ModuleType) -> None:
        raise RuntimeError("a patch that breaks")

    patches = PatchSet()
    patches.on_import(name, failing)
    patches.on_import(name, lambda module: ran.append(module.__name__))
    try:
        module = __import__(name)
        assert module.greet() == "hello"
        assert ran == [name]  # the hook after the failing one still ran
        assert tallyspan.stats().get("errors.instrument.patch", 0) == before + 1
        assert pending_hooks(name) == 0
    finally:
        patches.undo()
        sys.modules.pop(name, None)


def test_an_undone_patch_set_does_not_run_on_a_later_import(module_dir: Path) -> None:
    name = "tallyspan_test_undone_patch_target"
    _write_module(module_dir, name)
    ran: list[str] = []
    undone, kept = PatchSet(), PatchSet()
    undone.on_import(name, lambda module: ran.append("undone"))
    kept.on_import(name, lambda module: ran.append("kept"))
    kept.add(name, "greet", lambda: lambda wrapped, instance, args, kwargs: wrapped().upper())
    assert pending_hooks(name) == 3
    undone.undo()
    assert pending_hooks(name) == 2
    try:
        module = __import__(name)
        assert ran == ["kept"]
        assert module.greet() == "HELLO"
        kept.undo()
        assert module.greet() == "hello"
    finally:
        kept.undo()
        sys.modules.pop(name, None)
