"""Giving the C heap's free pages back: what is asked of the C library, and a C library that cannot."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
from tests.c_library import CLibrary
from tests.stats import losses


def test_giving_memory_back_asks_the_c_library_to_keep_no_free_pages(
    c_library: Callable[..., CLibrary],
) -> None:
    from tallyspan.plugin import release_free_memory

    library = c_library()
    assert release_free_memory() is True
    assert release_free_memory() is True
    assert library.calls == [(0,), (0,)]  # no padding kept at the top of the heap
    assert losses() == {}


def test_a_c_library_without_malloc_trim_is_not_asked(c_library: Callable[..., CLibrary]) -> None:
    from tallyspan.plugin import release_free_memory

    library = c_library(has_malloc_trim=False)  # musl, and other C libraries
    assert release_free_memory() is False
    assert library.calls == []
    assert losses() == {}


def test_a_c_library_whose_malloc_trim_fails_is_logged_and_counted_and_the_caller_goes_on(
    c_library: Callable[..., CLibrary], caplog: pytest.LogCaptureFixture
) -> None:
    from tallyspan.plugin import release_free_memory

    library = c_library(error=OSError("a foreign C library failed"))
    with caplog.at_level(logging.DEBUG, logger="tallyspan._memory"):
        assert release_free_memory() is False
    assert library.calls == [(0,)]
    assert losses() == {"errors.release_memory": 1}
    messages = [
        r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG and r.name == "tallyspan._memory"
    ]
    assert messages == ["tallyspan could not release free memory"]
