"""A real browser for the tests and scripts that look at a page: Debian's Chromium, headless, offline.

Each call starts a fresh Chromium with an empty profile of its own (removed after), none of its
background traffic (updates, sync, QUIC, component downloads), and either prints the DOM as it stands
once the page has loaded (``dump_dom``) or saves a PNG of the window (``screenshot``). ``.ci/run``
installs it (``apt-get install -y chromium``); ``chromium_executable()`` says None where it is absent.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path
from typing import Final

__all__ = [
    "CHROMIUM_FLAGS",
    "INSTALL_HINT",
    "Element",
    "chromium_executable",
    "dump_dom",
    "parse_dom",
    "png_size",
    "screenshot",
]

INSTALL_HINT: Final = "Chromium is not installed: apt-get install -y chromium (Debian's package)"
CHROMIUM_FLAGS: Final = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)
"""No network beyond the page itself, and no sandbox (CI runs as root in a container)."""
_TIMEOUT_S: Final = 120


def chromium_executable() -> str | None:
    """Chromium's path (Debian names it ``chromium``, others ``chromium-browser``), or None."""
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _run(page: Path, *flags: str) -> str:
    executable = chromium_executable()
    if executable is None:
        raise RuntimeError(INSTALL_HINT)
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        done = subprocess.run(
            [executable, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *flags, page.resolve().as_uri()],
            capture_output=True,
            text=True,
            timeout=_TIMEOUT_S,
            check=False,
        )
    if done.returncode != 0:
        raise RuntimeError(f"Chromium exited with {done.returncode}: {done.stderr[-2000:]}")
    return done.stdout


def dump_dom(page: Path) -> str:
    """The page's DOM, serialised, as Chromium holds it after loading ``page`` (and running whatever
    scripts the page was allowed to run)."""
    return _run(page, "--dump-dom")


def screenshot(page: Path, out: Path, *, window: tuple[int, int] = (1280, 1600)) -> None:
    """Save a PNG of ``page`` in a window of ``window`` (width, height) CSS pixels to ``out``."""
    _run(page, f"--window-size={window[0]},{window[1]}", f"--screenshot={out.resolve()}")
    if not out.is_file() or out.stat().st_size == 0:
        raise RuntimeError(f"{out}: Chromium wrote no screenshot")


def png_size(path: Path) -> tuple[int, int]:
    """Width and height of a PNG file, from its header."""
    header = path.read_bytes()[:24]
    if header[:8] != b"\x89PNG\r\n\x1a\n" or header[12:16] != b"IHDR":
        raise ValueError(f"{path} is not a PNG file")
    return int.from_bytes(header[16:20], "big"), int.from_bytes(header[20:24], "big")


class Element:
    """One element of a parsed DOM: its tag, attributes, children and text (its own and its children's)."""

    def __init__(self, tag: str, attributes: dict[str, str], parent: Element | None) -> None:
        self.tag = tag
        self.attributes = attributes
        self.parent = parent
        self.children: list[Element] = []
        self.parts: list[str | Element] = []

    @property
    def classes(self) -> set[str]:
        return set(self.attributes.get("class", "").split())

    @property
    def text(self) -> str:
        return "".join(part if isinstance(part, str) else part.text for part in self.parts)

    def iter(self) -> list[Element]:
        """This element and every element below it, in document order."""
        found = [self]
        for child in self.children:
            found.extend(child.iter())
        return found

    def find_all(self, tag: str | None = None, *, cls: str | None = None) -> list[Element]:
        """Every element below (and including) this one with that tag and class."""
        return [
            element
            for element in self.iter()
            if (tag is None or element.tag == tag) and (cls is None or cls in element.classes)
        ]

    def find(self, tag: str | None = None, *, cls: str | None = None, id: str | None = None) -> Element:
        """The first such element (with that id, if given); AssertionError when there is none."""
        for element in self.find_all(tag, cls=cls):
            if id is None or element.attributes.get("id") == id:
                return element
        raise AssertionError(f"no <{tag or '*'}> with class {cls!r} and id {id!r}")


_VOID: Final = frozenset(
    ("area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr")
)  # elements without an end tag


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("#document", {}, None)
        self.current = self.root

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, {name: value or "" for name, value in attrs}, self.current)
        self.current.children.append(element)
        self.current.parts.append(element)
        if tag not in _VOID:
            self.current = element

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, {name: value or "" for name, value in attrs}, self.current)
        self.current.children.append(element)
        self.current.parts.append(element)

    def handle_endtag(self, tag: str) -> None:
        node: Element | None = self.current
        while node is not None and node.tag != tag:
            node = node.parent
        if node is not None and node.parent is not None:
            self.current = node.parent

    def handle_data(self, data: str) -> None:
        self.current.parts.append(data)


def parse_dom(markup: str) -> Element:
    """``markup`` (a serialised DOM) as a tree of ``Element``."""
    builder = _Builder()
    builder.feed(markup)
    builder.close()
    return builder.root
