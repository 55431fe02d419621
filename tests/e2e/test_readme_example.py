"""docs/testing.md's "Testing your own bot" example runs, exactly as printed there."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

from tests.readme_support import DOCS, python_block, section


async def test_the_docs_testing_example_runs(tmp_path: Path) -> None:
    code = python_block(section("Testing your own bot", DOCS / "testing.md"))
    namespace: dict[str, object] = {}
    exec(compile(code, "docs/testing.md", "exec"), namespace)
    [example] = [value for name, value in namespace.items() if name.startswith("test_")]
    assert callable(example)
    run: Callable[[Path], Awaitable[None]] = example
    await run(tmp_path)
