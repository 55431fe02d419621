"""``bot.testing`` is a curated public face: what docs/testing.md names is exactly what imports."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import bot.testing
from tests.readme_support import DOCS, first_column_names, section

ROOT = Path(__file__).resolve().parents[2]


def test_all_is_exactly_the_docs_list() -> None:
    names = first_column_names(section("Testing your own bot", DOCS / "testing.md"))
    assert len(names) == len(set(names))
    assert sorted(bot.testing.__all__) == sorted(names)


def test_every_public_name_imports() -> None:
    namespace: dict[str, object] = {}
    exec("from bot.testing import *", namespace)
    for name in bot.testing.__all__:
        assert namespace[name] is getattr(bot.testing, name), name


def test_importing_bot_testing_starts_nothing_and_loads_no_runtime() -> None:
    code = (
        "import json, sys, threading, psutil\n"
        "import bot.testing\n"
        "print(json.dumps({'threads': threading.active_count(),\n"
        "    'children': len(psutil.Process().children()),\n"
        "    'loaded': sorted(m for m in sys.modules if m.split('.')[0] in\n"
        "        ('rq', 'openai', 'adapters', 'workers') or m.startswith('bot.gateway'))}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert json.loads(out.stdout) == {"threads": 1, "children": 0, "loaded": []}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_production_code_never_imports_the_test_doubles() -> None:
    # Benchmarks and the docs' pictures (a real stack on the fakes) are developer tools.
    allowed = (ROOT / "bot" / "testing", ROOT / "bot" / "bench")
    offenders = [
        f"{path.relative_to(ROOT)}: {module}"
        for package in ("bot", "adapters", "workers")
        for path in sorted((ROOT / package).rglob("*.py"))
        if not any(path.is_relative_to(folder) for folder in allowed)
        and not path.name.startswith("docs_pictures")
        for module in sorted(_imports(path))
        if module == "bot.testing" or module.startswith("bot.testing.")
    ]
    assert offenders == []
