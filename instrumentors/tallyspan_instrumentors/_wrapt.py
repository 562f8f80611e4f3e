"""wrapt across its major versions: the instrumentors load on wrapt 1.x as on 2.x.

opentelemetry-instrumentation releases before 0.61b0 pin ``wrapt<2``, so an app whose other OpenTelemetry
packages are a little older gets wrapt 1.x with us. wrapt 2 made ``ObjectProxy`` generic; on wrapt 1
``ObjectProxy[Any]`` raises TypeError at class creation, and every instrumentor failed to import. So a
proxy class subclasses :data:`ObjectProxy`: the generic type for the type checker, the plain class at
run time (a base class is evaluated even under ``from __future__ import annotations``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import wrapt

__all__ = ["ObjectProxy"]

if TYPE_CHECKING:
    ObjectProxy = wrapt.ObjectProxy[Any]
else:
    ObjectProxy = wrapt.ObjectProxy
