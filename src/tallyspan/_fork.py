"""Locks that must not outlive ``fork()``: a lock another thread held at the fork stays held for ever in
the child (only the forking thread survives), so the child's first span would deadlock the app.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable

__all__ = ["renew_lock_after_fork"]


def renew_lock_after_fork(
    owner: object, attribute: str = "_lock", new_lock: Callable[[], object] = threading.Lock
) -> None:
    """Give ``owner.<attribute>`` a fresh lock (``new_lock()``) in every child forked from now on.

    ``owner`` may be a module (``sys.modules[__name__]``) for a module-level lock.
    """
    if not hasattr(os, "register_at_fork"):
        return
    owner_ref = weakref.ref(owner)

    def renew() -> None:
        found = owner_ref()
        if found is not None:
            setattr(found, attribute, new_lock())

    os.register_at_fork(after_in_child=renew)
