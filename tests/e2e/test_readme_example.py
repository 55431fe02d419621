"""The README's "Testing your own bot" example runs, exactly as printed there."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

from tests.readme_support import python_block, section


async def test_the_readme_example_runs(tmp_path: Path) -> None:
    code = python_block(section("Testing your own bot"))
    namespace: dict[str, object] = {}
    exec(compile(code, "README.md", "exec"), namespace)
    [example] = [value for name, value in namespace.items() if name.startswith("test_")]
    assert callable(example)
    run: Callable[[Path], Awaitable[None]] = example
    await run(tmp_path)
