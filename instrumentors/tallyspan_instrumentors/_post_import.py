"""Patching a library when the app imports it, not when ``instrument()`` runs.

Importing a client library ourselves would make every ``instrument()`` pay its import (seconds for
some SDKs) in apps that have it installed but never use it. A :class:`PatchSet` registers wrapt
post-import hooks instead: the wrappers go on when the module is imported, or at once if it already
is. Undoing disables the hooks not yet run and unwraps what was wrapped.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

import wrapt

__all__ = ["PatchSet"]

#: What ``wrapt.wrap_function_wrapper`` leaves in place of the original (wrapt 2 splits it from ``ObjectProxy``).
_PROXY_TYPE: type = getattr(wrapt, "BaseObjectProxy", wrapt.ObjectProxy)


def _resolve(root: Any, path: str) -> tuple[Any, str] | None:
    """The object holding ``path`` (``"Class.method"`` or ``"function"``) and its last name, if present."""
    *parents, name = path.split(".")
    owner = root
    for parent in parents:
        owner = getattr(owner, parent, None)
    return (owner, name) if owner is not None and hasattr(owner, name) else None


def _unwrap(owner: Any, name: str) -> None:
    """Put back what ``owner.name`` held before it was wrapped; a no-op when it is not wrapped.

    Read from the owner's own ``__dict__``: wrapt wraps the raw class attribute, so a classmethod comes
    back as the classmethod (``getattr`` would give a method bound to this class).
    """
    raw = vars(owner).get(name)
    if isinstance(raw, _PROXY_TYPE) and hasattr(raw, "__wrapped__"):
        setattr(owner, name, raw.__wrapped__)


class PatchSet:
    """The wrappers of one instrumentation, applied on import and undone together."""

    def __init__(self) -> None:
        self.enabled = True
        self._targets: list[tuple[str, str]] = []

    def add(self, module: str, path: str, build: Callable[[], Callable[..., Any]]) -> None:
        """Wrap ``module.path`` with the wrapper ``build()`` makes, once ``module`` is imported.

        ``build`` runs in the import hook of ``module`` (the module is complete by then), so a wrapper may
        use the library; absent attributes (older versions) are skipped.
        """
        self._targets.append((module, path))
        wrapt.register_post_import_hook(functools.partial(self._patch, path, build), module)

    def on_import(self, module: str, hook: Callable[[ModuleType], None]) -> None:
        """Run ``hook(module)`` once ``module`` is imported (at once if it is), unless undone before."""
        wrapt.register_post_import_hook(functools.partial(self._run, hook), module)

    def _patch(self, path: str, build: Callable[[], Callable[..., Any]], module: ModuleType) -> None:
        # A hook of an instrumentation undone before the import must do nothing.
        if self.enabled and _resolve(module, path) is not None:
            wrapt.wrap_function_wrapper(module, path, build())

    def _run(self, hook: Callable[[ModuleType], None], module: ModuleType) -> None:
        if self.enabled:
            hook(module)

    def undo(self) -> None:
        """Disable the hooks not yet run and unwrap every target that was wrapped."""
        self.enabled = False
        for module, path in self._targets:
            loaded = sys.modules.get(module)
            found = _resolve(loaded, path) if loaded is not None else None
            if found is not None:
                _unwrap(*found)
        self._targets.clear()
