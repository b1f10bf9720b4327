"""The routes run no statements of their own: they parse, authorize, call the query
layer (backend/store/queries/) and shape the answer. Read from the source tree: no
route module builds a select/insert/update/delete, imports SQLAlchemy, runs a statement
on the session, or imports another route module (shared helpers live in
backend/api/deps.py, params.py, views.py, replay_requests.py)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
ROUTES = ROOT / "backend" / "api" / "routes"
STATEMENTS = {"select", "insert", "update", "delete"}
# Session methods that run or stage a statement (commit/rollback/expire are the route's
# transaction, and stay there).
SESSION_QUERIES = {"execute", "scalar", "scalars", "get", "get_one", "add", "add_all", "delete", "merge", "query"}


def _sqlalchemy_aliases(tree: ast.Module) -> set[str]:
    """Names the module binds to SQLAlchemy modules (`import sqlalchemy as sa`)."""
    return {
        (a.asname or a.name).split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for a in node.names
        if a.name.split(".")[0] == "sqlalchemy"
    }


def _statement_calls(tree: ast.Module, aliases: set[str]) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in STATEMENTS:
            found.append((node.lineno, f"{func.id}("))
        elif isinstance(func, ast.Attribute):
            receiver = func.value
            # sa.select(...), Table.insert(...), select(...).where(...).update(...)-style
            # builders on a SQLAlchemy module; dict.update and the like are not statements
            if isinstance(receiver, ast.Name) and receiver.id in aliases and func.attr in STATEMENTS:
                found.append((node.lineno, f"{receiver.id}.{func.attr}("))
            if isinstance(receiver, ast.Name) and receiver.id == "session" and func.attr in SESSION_QUERIES:
                found.append((node.lineno, f"session.{func.attr}("))
    return found


def _imports(tree: ast.Module, module: str) -> list[tuple[int, str]]:
    """(line, imported module) of every import, relative ones resolved."""
    package = module.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            out += [(node.lineno, f"{base}.{a.name}") for a in node.names]
            out.append((node.lineno, base))
    return out


def violations(source: str, module: str = "backend.api.routes.probe") -> list[str]:
    """What `source` (a route module) does that a route module must not."""
    tree = ast.parse(source)
    aliases = _sqlalchemy_aliases(tree)
    found = [f"{module}:{line} builds or runs a statement: {what}" for line, what in _statement_calls(tree, aliases)]
    for line, imported in _imports(tree, module):
        if imported.split(".")[0] == "sqlalchemy":
            found.append(f"{module}:{line} imports {imported}")
        parts = imported.split(".")
        if parts[:3] == ["backend", "api", "routes"] and len(parts) > 3 and imported != module:
            if parts[3] != module.split(".")[3] and parts[3] != "__init__":
                found.append(f"{module}:{line} imports another route module: {imported}")
    return sorted(set(found))


def route_modules() -> list[Path]:
    return sorted(p for p in ROUTES.glob("*.py") if p.name != "__init__.py")


def test_routes_build_and_run_no_statements_and_import_no_other_route():
    modules = route_modules()
    assert len(modules) >= 12  # the checks read the route modules (a moved folder would pass vacuously)
    found = []
    for path in modules:
        found += violations(path.read_text(), f"backend.api.routes.{path.stem}")
    assert found == []


def test_the_check_bites():
    """Each kind of breach is reported; words in strings and comments and dict.update are not."""
    source = '''
import sqlalchemy as sa
from sqlalchemy import select
from backend.api.routes.jobs import team_jobs
from . import traces
from .trace_data import require_ready
import backend.api.routes.live

def route(session, d):
    """select(Job) in a docstring is fine"""  # delete(x) in a comment too
    d.update({"a": 1})
    rows = session.scalars(select(Job).where(Job.id == 1))
    sa.delete(Job)
    session.execute(sa.text("update jobs set x = 1"))
    session.add(object())
    return insert(Job)
'''
    found = violations(source)
    for expected in (
        "imports sqlalchemy",
        "imports sqlalchemy.select",
        "another route module: backend.api.routes.jobs",
        "another route module: backend.api.routes.traces",
        "another route module: backend.api.routes.trace_data",
        "another route module: backend.api.routes.live",
        "statement: select(",
        "statement: sa.delete(",
        "statement: session.scalars(",
        "statement: session.execute(",
        "statement: session.add(",
        "statement: insert(",
    ):
        assert any(expected in f for f in found), (expected, found)
    assert not any("update(" in f for f in found), found
    clean = "from backend.api.deps import require_ready\n\ndef route(session):\n    session.commit()\n"
    assert violations(clean) == []


def test_query_functions_take_the_team_by_keyword():
    """Every public function of the query layer that takes a session is keyword-only
    after it, and the ones that read a team's rows name `team_id`."""
    found = []
    for path in sorted((ROOT / "backend" / "store" / "queries").glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, ast.FunctionDef) or node.name.startswith("_"):
                continue
            positional = [a.arg for a in node.args.posonlyargs + node.args.args]
            keyword = [a.arg for a in node.args.kwonlyargs]
            if positional[:1] == ["session"] and (positional != ["session"] or "team_id" not in keyword):
                found.append(f"{path.name}:{node.lineno} {node.name}({', '.join(positional)}, *, {keyword})")
    assert found == []
