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
from opentelemetry.instrumentation.utils import unwrap

__all__ = ["PatchSet"]


def _resolve(root: Any, path: str) -> tuple[Any, str] | None:
    """The object holding ``path`` (``"Class.method"`` or ``"function"``) and its last name, if present."""
    *parents, name = path.split(".")
    owner = root
    for parent in parents:
        owner = getattr(owner, parent, None)
    return (owner, name) if owner is not None and hasattr(owner, name) else None


class PatchSet:
    """The wrappers of one instrumentation, applied on import and undone together."""

    def __init__(self) -> None:
        self.enabled = True
        self._targets: list[tuple[str, str]] = []

    def add(self, module: str, path: str, wrapper: Callable[..., Any]) -> None:
        """Wrap ``module.path`` with ``wrapper`` once ``module`` is imported; absent attributes are skipped."""
        self._targets.append((module, path))
        wrapt.register_post_import_hook(functools.partial(self._patch, path, wrapper), module)

    def add_built_on_import(self, module: str, path: str, build: Callable[[], Callable[..., Any]]) -> None:
        """Like :meth:`add`, for a wrapper that can only be built once the library is importable.

        ``build`` runs in the import hook of ``module`` (the module is complete by then).
        """
        self._targets.append((module, path))
        wrapt.register_post_import_hook(functools.partial(self._build_and_patch, path, build), module)

    def _patch(self, path: str, wrapper: Callable[..., Any], module: ModuleType) -> None:
        # A hook of an instrumentation undone before the import must do nothing.
        if self.enabled and _resolve(module, path) is not None:
            wrapt.wrap_function_wrapper(module, path, wrapper)

    def _build_and_patch(
        self, path: str, build: Callable[[], Callable[..., Any]], module: ModuleType
    ) -> None:
        if self.enabled and _resolve(module, path) is not None:
            wrapt.wrap_function_wrapper(module, path, build())

    def undo(self) -> None:
        """Disable the hooks not yet run and unwrap every target that was wrapped."""
        self.enabled = False
        for module, path in self._targets:
            loaded = sys.modules.get(module)
            found = _resolve(loaded, path) if loaded is not None else None
            if found is not None:
                unwrap(*found)  # a no-op on an attribute that is not wrapped
        self._targets.clear()
