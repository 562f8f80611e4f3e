"""What must be renewed in a child after ``fork()``: a lock another thread held at the fork stays held for
ever in the child (only the forking thread survives), so the child's first span would deadlock the app;
a thread of ours is gone in the child, so its queue must start afresh.

One ``os.register_at_fork`` hook serves every owner, through weak references: the interpreter cannot
forget a hook, so one hook per object would pile up with every ``instrument()``/``uninstrument()`` cycle
(and each fork would pay for all of them).
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["after_fork_in_child", "renew_lock_after_fork"]

T = TypeVar("T")

_lock = threading.Lock()
_hooks: list[tuple[weakref.ref[Any], Callable[[Any], None]]] = []
_registered_at: int = 0
"""How many hooks there were when dead ones were last swept: sweep again when the list doubles."""


def _run_hooks_in_child() -> None:
    global _hooks, _lock
    _lock = threading.Lock()  # a thread registering at the fork held it
    alive = []
    for owner_ref, hook in _hooks:
        owner = owner_ref()
        if owner is not None:
            alive.append((owner_ref, hook))
            hook(owner)
    _hooks = alive


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_run_hooks_in_child)


def after_fork_in_child(owner: T, hook: Callable[[T], None]) -> None:
    """Call ``hook(owner)`` in every child forked from now on, for as long as ``owner`` lives.

    ``owner`` may be a module (``sys.modules[__name__]``). Hooks run in the order they were added.
    """
    global _hooks, _registered_at
    if not hasattr(os, "register_at_fork"):
        return
    with _lock:
        if len(_hooks) >= 2 * max(_registered_at, 16):
            _hooks = [(ref, fn) for ref, fn in _hooks if ref() is not None]
            _registered_at = len(_hooks)
        _hooks.append((weakref.ref(owner), hook))


def renew_lock_after_fork(
    owner: object, attribute: str = "_lock", new_lock: Callable[[], object] = threading.Lock
) -> None:
    """Give ``owner.<attribute>`` a fresh lock (``new_lock()``) in every child forked from now on.

    ``owner`` may be a module (``sys.modules[__name__]``) for a module-level lock.
    """
    after_fork_in_child(owner, lambda found: setattr(found, attribute, new_lock()))
