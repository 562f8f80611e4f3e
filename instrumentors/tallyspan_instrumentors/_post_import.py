"""Patching a library when the app imports it, not when ``instrument()`` runs.

Importing a client library ourselves would make every ``instrument()`` pay its import (seconds for
some SDKs) in apps that have it installed but never use it. A :class:`PatchSet` registers wrapt
post-import hooks instead: the wrappers go on when the module is imported, or at once if it already
is. Undoing takes out the hooks not yet run and unwraps what was wrapped.

**One wrapt hook per module.** wrapt keeps a hook registered for a module that is not imported until the
module is, and cannot take one back. Registered there directly, the hooks of every instrumentation undone
before its library was imported stayed for the life of the process, each holding its instrumentation's
state (its tracer, its settings): an app or a test suite that instruments again and again kept them all,
and a library imported at last ran every one of them. So each module gets one wrapt hook, which runs
the hooks pending here; ``undo`` takes its own out of them.

**Closest to the library.** When another instrumentation (OpenTelemetry's openai-v2, OpenLLMetry) has
already wrapped a method with wrapt, our wrapper goes *beneath* theirs, around the original, instead of
on top. Whatever the order of instrumentation, their wrapper then runs first and its model-call span is
current when ours runs, so ours records into it rather than opening a second span for the same call
(``_calls.start_genai_call``). Their ``uninstrument()`` puts our wrapper back in place of theirs, and
undoing ours takes out exactly our own wrapper, wherever it sits in the chain.
"""

from __future__ import annotations

import functools
import logging
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

import wrapt

from tallyspan.plugin import renew_lock_after_fork, swallowed

__all__ = ["PatchSet", "pending_hooks"]

_logger = logging.getLogger(__name__)

_Hook = Callable[[ModuleType], None]

#: The hooks of live patch sets waiting for their module's import, by module name.
_pending: dict[str, list[_Hook]] = {}
#: Modules whose one wrapt hook is registered and has not run yet.
_hooked: set[str] = set()
_pending_lock = threading.Lock()
renew_lock_after_fork(sys.modules[__name__], "_pending_lock")  # a fork while another thread held it


def pending_hooks(module: str) -> int:
    """How many hooks wait for ``module``'s import (for tests: undone instrumentations leave none)."""
    with _pending_lock:
        return len(_pending.get(module, ()))


def _when_imported(name: str, hook: _Hook) -> None:
    """Run ``hook(module)`` once the module ``name`` is imported, at once if it is (as wrapt does)."""
    with _pending_lock:
        module = sys.modules.get(name)
        register = False
        if module is None:
            _pending.setdefault(name, []).append(hook)
            register = name not in _hooked
            _hooked.add(name)
    if module is not None:
        _run_guarded(hook, module)
    elif register:
        wrapt.register_post_import_hook(functools.partial(_run_pending, name), name)


def _run_pending(name: str, module: ModuleType) -> None:
    with _pending_lock:
        hooks = _pending.pop(name, [])
        _hooked.discard(name)  # wrapt has let go of it: a module imported again needs a new one
    for hook in hooks:
        _run_guarded(hook, module)


def _run_guarded(hook: _Hook, module: ModuleType) -> None:
    try:
        hook(module)
    except Exception:  # in the app's import: our patching failing must not fail the import
        swallowed(_logger, "instrument.patch", "tallyspan could not patch a library as it was imported")


def _forget(hooks: list[_Hook]) -> None:
    """Take ``hooks`` out of the pending ones (those not run yet)."""
    ids = {id(hook) for hook in hooks}  # the caller holds them: their ids stay theirs meanwhile
    with _pending_lock:
        for name in list(_pending):
            kept = [pending for pending in _pending[name] if id(pending) not in ids]
            if kept:
                _pending[name] = kept
            else:
                del _pending[name]  # the module's wrapt hook stays, and finds nothing to run


#: What ``wrapt.wrap_function_wrapper`` leaves in place of the original (wrapt 2 splits it from ``ObjectProxy``).
_PROXY_TYPE: type = getattr(wrapt, "BaseObjectProxy", wrapt.ObjectProxy)


def _is_proxy(value: Any) -> bool:
    """True for a wrapt proxy (a function wrapper; stays ``Any`` for the type checker, unlike isinstance)."""
    return isinstance(value, _PROXY_TYPE)


def _resolve(root: Any, path: str) -> tuple[Any, str] | None:
    """The object holding ``path`` (``"Class.method"`` or ``"function"``) and its last name, if present."""
    *parents, name = path.split(".")
    owner = root
    for parent in parents:
        owner = getattr(owner, parent, None)
    return (owner, name) if owner is not None and hasattr(owner, name) else None


def _wrap_innermost(owner: Any, name: str, wrapper: Callable[..., Any]) -> Any:
    """Wrap ``owner.name`` with ``wrapper`` beneath any wrapt wrappers already on it; return our proxy.

    Read from the owner's own ``__dict__``: wrapt wraps the raw class attribute (a classmethod stays one).
    """
    outer = vars(owner).get(name)
    if not _is_proxy(outer):
        wrapt.wrap_function_wrapper(owner, name, wrapper)
        return vars(owner).get(name)
    innermost = outer
    while _is_proxy(innermost.__wrapped__):
        innermost = innermost.__wrapped__
    ours = wrapt.FunctionWrapper(innermost.__wrapped__, wrapper)
    try:
        innermost.__wrapped__ = ours
    except (AttributeError, TypeError):  # a proxy that will not be re-pointed: go on top of it
        _logger.debug("could not wrap %s.%s beneath another wrapper; wrapping on top", owner, name)
        wrapt.wrap_function_wrapper(owner, name, wrapper)
        return vars(owner).get(name)
    return ours


def _is(proxy: Any, ours: Any) -> bool:
    """True for our proxy, or for it bound to the class: OpenTelemetry's ``unwrap()`` reads the attribute
    with ``getattr``, so undoing a wrapper on top of ours leaves ours behind in that bound form."""
    return proxy is ours or getattr(proxy, "_self_parent", None) is ours


def _unwrap(owner: Any, name: str, ours: Any) -> None:
    """Take our proxy ``ours`` out of the wrappers on ``owner.name``, leaving the others as they are."""
    current = vars(owner).get(name)
    if _is(current, ours):
        setattr(owner, name, ours.__wrapped__)
        return
    while _is_proxy(current):
        inner = current.__wrapped__
        if _is(inner, ours):
            current.__wrapped__ = ours.__wrapped__
            return
        current = inner


class PatchSet:
    """The wrappers of one instrumentation, applied on import and undone together."""

    def __init__(self) -> None:
        self.enabled = True
        self._applied: list[tuple[Any, str, Any]] = []
        self._hooks: list[_Hook] = []

    def add(self, module: str, path: str, build: Callable[[], Callable[..., Any]]) -> None:
        """Wrap ``module.path`` with the wrapper ``build()`` makes, once ``module`` is imported.

        ``build`` runs in the import hook of ``module`` (the module is complete by then), so a wrapper may
        use the library; absent attributes (older versions) are skipped.
        """
        self._register(module, functools.partial(self._patch, path, build))

    def on_import(self, module: str, hook: Callable[[ModuleType], None]) -> None:
        """Run ``hook(module)`` once ``module`` is imported (at once if it is), unless undone before."""
        self._register(module, functools.partial(self._run, hook))

    def _register(self, module: str, hook: _Hook) -> None:
        self._hooks.append(hook)
        _when_imported(module, hook)

    def _patch(self, path: str, build: Callable[[], Callable[..., Any]], module: ModuleType) -> None:
        # A hook of an instrumentation undone before the import must do nothing.
        found = _resolve(module, path) if self.enabled else None
        if found is not None:
            owner, name = found
            self._applied.append((owner, name, _wrap_innermost(owner, name, build())))

    def _run(self, hook: Callable[[ModuleType], None], module: ModuleType) -> None:
        if self.enabled:
            hook(module)

    def undo(self) -> None:
        """Take out the hooks not yet run and unwrap every target that was wrapped."""
        self.enabled = False  # a hook already taken by an import running on another thread does nothing
        _forget(self._hooks)
        self._hooks.clear()
        for owner, name, ours in reversed(self._applied):
            _unwrap(owner, name, ours)
        self._applied.clear()
