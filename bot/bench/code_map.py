"""``fanbot bench map``: the figures of the code's shape, measured on the checkout it runs from.

Static figures (files as text, and ``grimp``'s import graph):

- **production lines**: physical lines of the ``.py`` files, for the core (``bot/`` without
  ``bot/testing``, ``bot/bench`` and ``bot/demo``, plus ``adapters/`` and ``workers/``),
  ``bot/`` alone without those three, and all of ``bot/``+``adapters/``+``workers/``;
- **raw Redis client uses**: attribute reads ``<…>deps.redis`` (an expression whose last two
  names are ``deps`` and ``redis``) in production files outside ``bot/store/``;
- **import cycles**: strongly connected components of the import graph of ``bot``,
  ``adapters`` and ``workers`` (imports under ``TYPE_CHECKING`` left out), between modules
  and between packages (a module's package is its first two name parts: ``bot.runs``,
  ``adapters.slack``, ``workers.jobs``);
- **same basename**: names shared by two or more modules in ``bot/`` (``__init__`` and
  ``__main__`` aside); **top level**: modules directly in ``bot/`` (``__init__`` aside);
- **duplicates pairs**: the ``duplicates`` command's pair count over a copy of the production
  files (``not measured`` when it is not on ``PATH``);
- **run title sites**: f-strings in production code with ``#`` right before a field whose
  expression ends in ``seq`` (``f"#{run.seq}"``).

The path figures (modules touched by one spawn and by one stop, store calls of the stop)
come from running them: see :mod:`bot.bench.path_trace`.
"""

from __future__ import annotations

import ast
import itertools
import re
import shutil
import subprocess
import tempfile
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

PRODUCTION_ROOTS = ("bot", "adapters", "workers")
NOT_CORE = ("bot/testing", "bot/bench", "bot/demo")


def _under(rel: str, prefix: str) -> bool:
    return rel == prefix or rel.startswith(prefix + "/")


def is_production(path: Path, root: Path) -> bool:
    """A ``.py`` file of ``bot/``, ``adapters/`` or ``workers/`` under ``root``, outside
    ``bot/testing``, ``bot/bench`` and ``bot/demo``."""
    try:
        rel = path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return False
    if not rel.endswith(".py") or any(_under(rel, p) for p in NOT_CORE):
        return False
    return any(_under(rel, p) for p in PRODUCTION_ROOTS)


def python_files(root: Path, *tops: str) -> list[Path]:
    """Every ``.py`` file below ``root/<top>`` for each top, sorted."""
    return sorted(p for top in tops for p in (root / top).rglob("*.py") if p.is_file())


def production_files(root: Path) -> list[Path]:
    return [p for p in python_files(root, *PRODUCTION_ROOTS) if is_production(p, root)]


def count_lines(paths: Iterable[Path]) -> int:
    """Physical lines (what ``wc -l`` counts for files that end in a newline)."""
    return sum(len(p.read_text(encoding="utf-8", errors="replace").splitlines()) for p in paths)


def strongly_connected(graph: Mapping[str, Iterable[str]]) -> list[tuple[str, ...]]:
    """Components of two or more nodes (Tarjan, iterative), each sorted, sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[tuple[str, ...]] = []
    nodes = sorted(set(graph) | {t for targets in graph.values() for t in targets})
    edges = {n: sorted(graph.get(n, ())) for n in nodes}
    for start in nodes:
        if start in index:
            continue
        work = [(start, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            if i < len(edges[node]):
                work.append((node, i + 1))
                nxt = edges[node][i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(tuple(sorted(component)))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return sorted(found)


def package_graph(graph: Mapping[str, Iterable[str]], *, depth: int = 2) -> dict[str, set[str]]:
    """The module graph with each module replaced by its first ``depth`` name parts."""

    def unit(name: str) -> str:
        return ".".join(name.split(".")[:depth])

    packages: dict[str, set[str]] = defaultdict(set)
    for source, targets in graph.items():
        packages[unit(source)] |= {unit(t) for t in targets if unit(t) != unit(source)}
    return dict(packages)


def import_graph(roots: Sequence[str] = PRODUCTION_ROOTS) -> dict[str, set[str]]:
    """Who imports whom among ``roots`` (``grimp``, ``TYPE_CHECKING`` imports left out)."""
    import grimp

    graph = grimp.build_graph(*roots, exclude_type_checking_imports=True)
    names = set(graph.modules)
    return {m: graph.find_modules_directly_imported_by(m) & names for m in names}


def _is_deps_redis(node: ast.AST) -> bool:
    if not isinstance(node, ast.Attribute) or node.attr != "redis":
        return False
    owner = node.value
    return (isinstance(owner, ast.Name) and owner.id == "deps") or (
        isinstance(owner, ast.Attribute) and owner.attr == "deps"
    )


def raw_redis_uses(source: str) -> int:
    """``deps.redis`` reads in one file's source (``req.deps.redis`` too)."""
    return sum(_is_deps_redis(n) for n in ast.walk(ast.parse(source)))


def title_sites(source: str) -> int:
    """f-strings that write ``#`` right before a field ending in ``seq``."""
    count = 0
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.JoinedStr):
            continue
        parts = node.values
        for before, field in itertools.pairwise(parts):
            if (
                isinstance(before, ast.Constant)
                and str(before.value).endswith("#")
                and isinstance(field, ast.FormattedValue)
                and ast.unparse(field.value).endswith("seq")
            ):
                count += 1
    return count


def shared_basenames(paths: Iterable[Path]) -> dict[str, int]:
    """Module names (``__init__``/``__main__`` aside) that two or more files share."""
    names = Counter(p.stem for p in paths if p.stem not in ("__init__", "__main__"))
    return {name: n for name, n in sorted(names.items()) if n > 1}


_PAIRS = re.compile(r"^(\d+) pairs? of places")


def parse_duplicates(output: str) -> int | None:
    """The pair count of ``duplicates``' first line (0 for ``no duplicates``)."""
    first = output.strip().splitlines()[0] if output.strip() else ""
    if first.startswith("no duplicates"):
        return 0
    found = _PAIRS.match(first)
    return int(found[1]) if found else None


def duplicate_pairs(root: Path, files: Sequence[Path]) -> int | None:
    """``duplicates``' pair count over a copy of ``files``; None without the command."""
    command = shutil.which("duplicates")
    if command is None:
        return None
    with tempfile.TemporaryDirectory(prefix="fanbot-map-") as tmp:
        for path in files:
            target = Path(tmp) / path.relative_to(root)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
        done = subprocess.run(
            [command, "--seconds", "300"],
            cwd=tmp,
            capture_output=True,
            text=True,
            timeout=400,
            check=False,
        )
    return parse_duplicates(done.stdout)


@dataclass(frozen=True, kw_only=True)
class StaticMap:
    """The static figures (see the module docstring)."""

    core: tuple[int, int]
    bot_core: tuple[int, int]
    everything: tuple[int, int]
    raw_redis: tuple[int, int]
    module_cycles: list[tuple[str, ...]]
    package_cycles: list[tuple[str, ...]]
    shared: dict[str, int]
    top_level: int
    duplicates: int | None
    titles: tuple[int, int]


def _per_file(files: Iterable[Path], count: object) -> tuple[int, int]:
    hits = [count(p.read_text(encoding="utf-8")) for p in files]  # type: ignore[operator]
    return sum(hits), sum(1 for h in hits if h)


def static_map(root: Path) -> StaticMap:
    """Measure the tree at ``root`` (whose packages must be the ones importable here)."""
    production = production_files(root)
    bot_core = [p for p in production if _under(p.relative_to(root).as_posix(), "bot")]
    everything = python_files(root, *PRODUCTION_ROOTS)
    outside_store = [
        p for p in production if not _under(p.relative_to(root).as_posix(), "bot/store")
    ]
    graph = import_graph()
    bot_all = python_files(root, "bot")
    return StaticMap(
        core=(len(production), count_lines(production)),
        bot_core=(len(bot_core), count_lines(bot_core)),
        everything=(len(everything), count_lines(everything)),
        raw_redis=_per_file(outside_store, raw_redis_uses),
        module_cycles=strongly_connected(graph),
        package_cycles=strongly_connected(package_graph(graph)),
        shared=shared_basenames(bot_all),
        top_level=sum(1 for p in (root / "bot").glob("*.py") if p.stem != "__init__"),
        duplicates=duplicate_pairs(root, production),
        titles=_per_file(production, title_sites),
    )
