"""House rules read from the source tree: no function of the product (every package CI
type-checks) over MAX_FUNCTION_LINES lines, and no block of REPEAT_LINES or more lines
repeated inside dashboard/pages/ (a page draws the shared pieces from dashboard/views/
instead of copying them).

Lines are compared normalized: stripped, with comments, blank lines and import
statements left out (two pages naming the same helpers is no copy)."""

from __future__ import annotations

import ast
import io
import tokenize
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "dashboard"
PRODUCT = ("core", "backend", "workers", "engine", "dashboard", "rlvr_explorer")
MAX_FUNCTION_LINES = 80
REPEAT_LINES = 6


def function_lengths(source: str) -> list[tuple[str, int, int]]:
    """(name, first line, lines) of every function and method, from its `def` to its end."""
    return [
        (node.name, node.lineno, (node.end_lineno or node.lineno) - node.lineno + 1)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    ]


def normalized_lines(source: str) -> list[tuple[int, str]]:
    """(line number, text) of the lines that count: stripped, comments removed, blank
    lines and import statements left out."""
    lines = source.splitlines()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            row, col = tok.start
            lines[row - 1] = lines[row - 1][:col]
    imports = {
        n
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for n in range(node.lineno, (node.end_lineno or node.lineno) + 1)
    }
    return [(i, text.strip()) for i, text in enumerate(lines, 1) if text.strip() and i not in imports]


def repeated_blocks(files: dict[str, str], size: int = REPEAT_LINES) -> list[list[tuple[str, int]]]:
    """Each window of `size` normalized lines found in more than one place: the places
    ((file, first line) each)."""
    seen: dict[int, list[tuple[str, int]]] = defaultdict(list)
    for name, source in files.items():
        lines = normalized_lines(source)
        for k in range(len(lines) - size + 1):
            window = lines[k : k + size]
            seen[hash(tuple(text for _, text in window))].append((name, window[0][0]))
    return [places for places in seen.values() if len(places) > 1]


def _sources(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(ROOT)): p.read_text() for p in sorted(folder.rglob("*.py"))}


def test_the_checks_see_what_they_look_for():
    long_body = "def f():\n" + "    x = 1\n" * 85
    assert function_lengths(long_body) == [("f", 1, 86)]
    block = "".join(f"y{i} = g({i})  # note {i}\n\n" for i in range(6))
    a, b = "a = 1\n" + block, "import os\n# only a comment\n" + block.replace("# note", "# other")
    assert [sorted(p) for p in repeated_blocks({"a.py": a, "b.py": b})] == [[("a.py", 2), ("b.py", 3)]]
    assert repeated_blocks({"a.py": a, "b.py": "b = 2\n" + block.replace("g(5)", "h(5)")}) == []


def test_no_product_function_is_over_80_lines():
    long = [
        f"{path}:{line} {name} ({n} lines)"
        for package in PRODUCT
        for path, source in _sources(ROOT / package).items()
        for name, line, n in function_lengths(source)
        if n > MAX_FUNCTION_LINES
    ]
    assert not long, "split these into named sections:\n" + "\n".join(long)


def test_no_block_is_repeated_in_the_pages():
    repeats = repeated_blocks(_sources(DASHBOARD / "pages"))
    shown = sorted(", ".join(f"{path}:{line}" for path, line in sorted(places)) for places in repeats)
    assert not shown, f"blocks of {REPEAT_LINES}+ lines found more than once:\n" + "\n".join(shown)
