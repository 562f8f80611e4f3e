"""Code and data told by the parsers and lexers made for them, not by the look of a line.

The language checks judge prose; a deliverable (or a block of one) that is code or data has no language
(DEFINITIONS.md: "a bare program with English identifiers, comments and string literals is code, not
English prose", fenced or not). ``is_code`` asks, in turn:

- the parsers of the standard library and of our dependencies: ``json`` (also a document cut at
  max_tokens), ``ast`` (a Python module), ``tomllib``, ``configparser`` (INI), PyYAML (a mapping with
  identifier keys), ``csv`` (rows of equal width: CSV, TSV, Markdown tables), ``html.parser`` (markup:
  HTML, XML, ``<tool_call>`` wrappers), a unified diff's hunks, and ``datetime`` (log records that each
  begin with a timestamp);
- else Pygments' lexers of the common programming languages: a block is code in a language when that
  language's lexer reads it without an error, most of what is neither a literal nor a comment is syntax
  (keywords, operators, punctuation, numbers, names of functions, tags, builtins), and that remainder
  holds no English sentence and no CJK text. English prose read by a lexer is a run of plain names with
  English grammar between them: that is what tells it apart, whatever the lexer.

Comments, string literals and a markup's text are the code's own: they may hold English sentences (or
Japanese ones) without making the block prose, as long as the code around them is code. A cell, a value
or a text node that is an English sentence in data with no code around it keeps the block prose.

Every parser and lexer sees at most ``MAX_CODE_CHARS`` characters: a longer block is judged as prose, so
a huge output costs one bounded pass. Pygments loads with the first block that needs a lexer.
"""

from __future__ import annotations

import ast
import configparser
import csv
import json
import re
import sys
from collections.abc import Callable
from datetime import datetime
from functools import lru_cache
from html.parser import HTMLParser
from typing import Any
from unicodedata import category

from tallyspan._engine._jsonschema import too_deep

__all__ = ["MAX_CODE_CHARS", "TOKEN_BUDGET", "is_code"]

#: The longest block the parsers and lexers read (a longer one is judged as prose).
MAX_CODE_CHARS = 6000
#: Python parsed from this many lines at least (one line of English can be a valid expression).
_MIN_PYTHON_LINES = 2
#: A lexer's reading is code when this share of what is neither literal nor comment is syntax ...
_MIN_SYNTAX_SHARE = 0.4
#: ... with at least this many operators or brackets (not the commas and stops of prose).
_MIN_STRUCTURE_TOKENS = 2
#: The lexers tried, by Pygments alias: the languages answers are asked for most. Lexers that read any
#: text without an error and call capitalised words types (Haskell) or selectors (CSS) are left out;
#: their languages are caught by the C-like lexers or the parsers.
_LEXERS = (
    "python",
    "pytb",
    "c",
    "cpp",
    "csharp",
    "java",
    "kotlin",
    "go",
    "rust",
    "swift",
    "javascript",
    "typescript",
    "jsx",
    "php",
    "ruby",
    "sql",
    "bash",
    "powershell",
    "docker",
    "make",
    "tex",
)
# Punctuation a sentence has too: a lexer's operator or bracket that is not one of them is structure.
_PROSE_PUNCTUATION = frozenset(".,:;!?'\"-")
_HUNK = re.compile(r"@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@")
_CJK = re.compile(r"[\u3041-\u30FF\u3400-\u4DBF\u4E00-\u9FFF\uF900-\uFAFF\uAC00-\uD7AF]")
_IDENTIFIER = re.compile(r"[A-Za-z_][\w.-]*\Z")

#: ``has_sentence(text)``: True when ``text`` holds English prose (a sentence with English grammar).
SentenceTest = Callable[[str], bool]


def is_code(block: str, has_sentence: SentenceTest, budget: list[int] | None = None) -> bool:
    """True when ``block`` (a whole deliverable, or lines of one without Japanese prose) is code or
    data as a parser or a lexer made for it reads it.

    ``budget`` (one item, tokens left) is shared by the blocks of one text: the lexers of all of them
    together read at most that many tokens, so a text of ten thousand short blocks costs no more than
    one long one. Without it, each call has ``TOKEN_BUDGET`` of its own."""
    text = block.strip()
    if not text or len(text) > MAX_CODE_CHARS:
        return False
    if text[0] in "{[" and (is_json(text) or is_json(closed(text))):
        return True
    return (
        is_python(text)
        or _is_toml(text)
        or _is_ini(text)
        or _is_yaml(text, has_sentence)
        or _is_table(text, has_sentence)
        or _is_markup(text, has_sentence)
        or _is_diff(text)
        or _is_records(text)
        or _is_lexed_code(text, has_sentence, [TOKEN_BUDGET] if budget is None else budget)
    )


def is_json(text: str) -> bool:
    """``text`` is a JSON object or array, nested no deeper than the JSON check allows (a linear scan
    refuses it before the recursive parser runs)."""
    if text[:1] not in ("{", "[") or too_deep(text):
        return False
    try:
        document = json.loads(text)
    except (ValueError, RecursionError):
        return False
    return isinstance(document, (dict, list))


def closed(text: str) -> str:
    """``text`` with the brackets and string it left open closed: a JSON answer cut at max_tokens."""
    stack: list[str] = []
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "{[":
            stack.append("}" if char == "{" else "]")
        elif char in "}]" and stack:
            stack.pop()
    return text.rstrip().rstrip(",") + ('"' if in_string else "") + "".join(reversed(stack))


def is_python(text: str) -> bool:
    """A Python module of two lines or more that defines, imports, assigns or calls."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines or not any(ord(char) < 128 for char in lines[0][:1]):
        return False
    try:
        module = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    # Bare names and constants parse too ("Denmark"); a program defines, imports, assigns or calls. One
    # line must be a statement ("import os", "x = 1"): "Hello (world)" parses as a call.
    if len(lines) < _MIN_PYTHON_LINES:
        return any(not isinstance(node, ast.Expr) for node in module.body)
    return any(not isinstance(node, ast.Expr) or isinstance(node.value, ast.Call) for node in module.body)


def _is_toml(text: str) -> bool:
    if "=" not in text:
        return False
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10: the same parser, as a package
        import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]
    try:
        return bool(tomllib.loads(text))
    except (ValueError, RecursionError):  # TOMLDecodeError is a ValueError
        return False


def _is_ini(text: str) -> bool:
    if not text.startswith("["):
        return False
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text)
    except (configparser.Error, ValueError):
        return False
    return any(parser.options(section) for section in parser.sections())


def _is_yaml(text: str, has_sentence: SentenceTest) -> bool:
    """A YAML mapping of two keys or more, each an identifier (``image``, ``POSTGRES_PASSWORD``), whose
    values hold no English sentence: a configuration, not "Step 1: Install the package." lines."""
    if ":" not in text or "\n" not in text:
        return False
    import yaml  # a dependency of the contracts; loaded only here

    try:
        document = yaml.safe_load(text)
    except (yaml.YAMLError, ValueError, RecursionError):
        return False
    if not isinstance(document, dict) or len(document) < 2:
        return False
    keys: list[object] = []
    scalars: list[str] = []
    _walk(document, keys, scalars)
    if not all(isinstance(key, str) and _IDENTIFIER.match(key) for key in keys):
        return False
    return not has_sentence("\n".join(scalars))


def _walk(value: object, keys: list[object], scalars: list[str]) -> None:
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            keys.extend(item)
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, str):
            scalars.append(item)


def _is_table(text: str, has_sentence: SentenceTest) -> bool:
    """Rows of equal width, two columns or more, in CSV, TSV or a Markdown table, whose cells hold no
    English sentence."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) < 2:
        return False
    for delimiter in (",", "\t", "|", ";"):
        if not all(delimiter in line for line in lines):
            continue
        rows = lines
        if delimiter == "|":
            # A Markdown table: its rows begin and end with a bar, and a rule of dashes follows the head.
            rows = [line.strip("|") for line in lines if not set(line) <= set("|-: ")]
        try:
            cells = list(csv.reader(rows, delimiter=delimiter))
        except csv.Error:
            continue
        widths = {len(row) for row in cells}
        if len(widths) == 1 and widths.pop() >= 2 and len(cells) >= 2:
            return not has_sentence("\n".join(cell for row in cells for cell in row))
    return False


class _Markup(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags = 0
        self.data: list[str] = []

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        self.tags += 1

    def handle_endtag(self, tag: str) -> None:
        self.tags += 1

    def handle_decl(self, decl: str) -> None:
        self.tags += 1

    def handle_pi(self, data: str) -> None:
        self.tags += 1

    def handle_data(self, data: str) -> None:
        self.data.append(data)


def _is_markup(text: str, has_sentence: SentenceTest) -> bool:
    """HTML or XML that begins with a tag: its text nodes are the markup's content. It is code when
    they hold no English sentence, or when they are the lesser part (a page, not a paragraph in tags);
    a text node that is itself code (JSON in ``<tool_call>``) is code."""
    if not text.startswith("<"):
        return False
    parser = _Markup()
    try:
        parser.feed(text)
        parser.close()
    except (ValueError, AssertionError):
        return False
    if not parser.tags:
        return False
    data = [chunk.strip() for chunk in parser.data if chunk.strip()]
    prose = [chunk for chunk in data if not (is_json(chunk) or is_python(chunk))]
    text_chars = sum(len(chunk) for chunk in prose)
    if not prose or text_chars * 2 <= len(text) - text_chars:
        return True
    return not has_sentence("\n".join(prose))


def _is_diff(text: str) -> bool:
    """A unified diff: a hunk header, and after it only context, added, removed or file lines."""
    lines = text.splitlines()
    header = next((index for index, line in enumerate(lines) if _HUNK.match(line)), None)
    if header is None:
        return False
    return all(not line or line[0] in " +-\\@" or line.startswith("diff ") for line in lines[header + 1 :])


def _is_records(text: str) -> bool:
    """Log records: two lines or more, each beginning with a date or a date and time."""
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) < 2:
        return False
    for line in lines:
        fields = line.split(None, 2)
        stamps = [fields[0]] + ([f"{fields[0]}T{fields[1]}"] if len(fields) > 1 else [])
        if not any(_timestamp(stamp.strip("[]")) for stamp in stamps):
            return False
    return True


def _timestamp(field: str) -> bool:
    if len(field) < 10 or not field[:4].isdigit():
        return False
    try:
        datetime.fromisoformat(field.replace(",", "."))
    except ValueError:
        return False
    return True


#: Full-width ASCII (（）＝；) and the ideographic space, as a Japanese input method types them in code.
_HALF_WIDTH = {point: point - 0xFEE0 for point in range(0xFF01, 0xFF5F)} | {0x3000: 0x20}


#: A line of plain prose holds six words or more in a row and no character that opens a literal or a
#: comment in any of the languages (quotes, #, //, --, %, ;, <), so no lexer can set its words aside.
_SIX_WORDS = re.compile(r"[A-Za-z]+(?:,? [A-Za-z]+){5,}")
_OPENS_LITERAL = re.compile(r"['\"`#/%;<]")
#: What opens a literal or a comment that can span lines, and so cover a line of prose.
_SPANNING = ("/*", '"""', "'''", "<!--", "`", "=begin", "<<", "--[[", "{-")


def _is_lexed_code(text: str, has_sentence: SentenceTest, budget: list[int]) -> bool:
    if not any(opener in text for opener in _SPANNING):
        # Prose that no lexer can hide in a literal or comment is prose, whichever lexer reads it: the
        # twenty lexers are not run on an English paragraph.
        for line in text.splitlines():
            if _OPENS_LITERAL.search(line) is None and any(
                has_sentence(match.group(0)) for match in _SIX_WORDS.finditer(line)
            ):
                return False
    # The lexers are pure Python (several microseconds a character each): they read a bounded beginning,
    # and all of them together a bounded number of tokens, so a huge block costs no more than a long one.
    text = text[:_LEXED_CHARS].translate(_HALF_WIDTH)
    if not text.isascii():
        # A formula's symbols (√, ∫, ±, ≤) are operators: read as one, they are no error of the lexer.
        text = "".join("+" if category(char) == "Sm" else char for char in text)
    if budget[0] <= 0:
        return False
    return any(_reads_as_code(text, lexer, has_sentence, budget) for lexer in _lexers())


@lru_cache(maxsize=1)
def _lexers() -> tuple[Any, ...]:
    from pygments.lexers import get_lexer_by_name

    return tuple(get_lexer_by_name(name, stripnl=False) for name in _LEXERS)


@lru_cache(maxsize=1)
def _token_kinds() -> tuple[Any, ...]:
    from pygments.token import Comment, Error, Generic, Keyword, Literal, Name, Number, Other, String, Text

    # (set aside: the code's own text; plain: names and text that prose is made of)
    aside = (String, Comment, Generic)
    plain = (Name, Name.Other, Text, Other)
    return Error, aside, plain, Number, Literal, Keyword, Generic.Traceback, Comment


#: The beginning of a block the lexers read, and the tokens all of them together read for one block.
_LEXED_CHARS = 2000
TOKEN_BUDGET = 3000
#: How much of a line's remainder is read before it is tested for English: prose shows itself early.
_TEST_EVERY = 120


def _reads_as_code(text: str, lexer: Any, has_sentence: SentenceTest, budget: list[int]) -> bool:
    error, aside, plain, number, literal, keyword, traceback, comment = _token_kinds()
    syntax = plain_chars = structure = 0
    headed = commented = False
    rest: list[str] = []
    line: list[str] = []  # the remainder of the current line, tested for English as it is read
    line_chars = 0
    previous = ""
    for kind, value in lexer.get_tokens(text):
        budget[0] -= 1
        if kind in error or budget[0] < 0:
            return False
        if any(kind in group for group in aside):
            # A literal that opens inside a word is an apostrophe of prose (here's), not a string.
            if previous[-1:].isalpha() and value[:1] in "'\"`":
                return False
            rest.append("\n")
            previous = value
            # A Python traceback's header, read by the traceback lexer: the output of a program.
            headed = headed or kind in traceback
            # A // or /* comment: the comment syntax of the C family, which no prose line begins with.
            commented = commented or (kind in comment and value[:2] in ("//", "/*"))
            continue
        # A keyword is the language's own word, not one of the answer's ("order by" in SQL): it stands in
        # the remainder as a capital letter, neither a function word nor an ordinary one, so it neither
        # makes a sentence of identifiers nor breaks up a sentence of prose.
        piece = "Q" if kind in keyword else value
        rest.append(piece)
        line.append(piece)
        line_chars += len(piece)
        previous = value
        if not headed and ("\n" in piece or line_chars >= _TEST_EVERY):
            # Prose is told from its first lines: stop reading at the first line with an English sentence.
            if has_sentence("".join(line)):
                return False
            line = line[-1:] if "\n" not in piece else []
            line_chars = sum(len(part) for part in line)
        size = len(value.strip())
        if not size:
            continue
        if kind in plain or (kind in literal and kind not in number):
            plain_chars += size
        else:
            syntax += size
            if not set(value.strip()) <= _PROSE_PUNCTUATION and not value.strip().isalnum():
                structure += 1
    if headed:
        return True
    if not commented and (
        structure < _MIN_STRUCTURE_TOKENS or syntax < _MIN_SYNTAX_SHARE * (syntax + plain_chars)
    ):
        return False
    remainder = "".join(rest)
    return _CJK.search(remainder) is None and not has_sentence(remainder)
