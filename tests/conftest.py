"""Shared fixtures: one private redis-server per test session, flushed between tests.

Also marks ``e2e`` every test that forks workers or runs a gateway process, so
``pytest -m "not e2e"`` is the fast suite (a ``pytestmark`` in a conftest marks nothing).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import ModuleType

import pytest
import redis

from bot.redis.server import RedisServer

TESTS = Path(__file__).parent
# Every test here forks workers or runs a gateway (or console) process.
E2E_DIRS = frozenset({"e2e", "faults"})
# Modules whose objects start worker or gateway processes: a test module, or the module
# of a fixture a test uses, holding one of their objects is an end-to-end test.
HARNESS_MODULES = frozenset({"bot.testing.stack", "bot.bench.soak", "bot.console.app"})


def _modules_of(item: pytest.Item) -> Iterable[ModuleType]:
    module = getattr(item, "module", None)
    if module is not None:
        yield module
    info = getattr(item, "_fixtureinfo", None)
    for defs in info.name2fixturedefs.values() if info is not None else ():
        for fixture_def in defs:
            name = getattr(fixture_def.func, "__module__", None)
            if name in sys.modules:
                yield sys.modules[name]


def forks_processes(item: pytest.Item) -> bool:
    """Whether ``item`` forks workers or runs a gateway process (by path or harness use)."""
    parts = item.path.relative_to(TESTS).parts if item.path.is_relative_to(TESTS) else ()
    if parts and parts[0] in E2E_DIRS:
        return True
    return any(
        getattr(value, "__module__", None) in HARNESS_MODULES
        for module in _modules_of(item)
        for value in vars(module).values()
    )


# Files slow for other reasons than worker processes (real CLI start-ups in subprocesses,
# a homeserver, property-based searches): about how many seconds each takes in all.
SLOW_FILES = {
    "tests/integration/test_cli_startup.py": 100.0,
    "tests/integration/test_doctor.py": 100.0,
    "tests/integration/test_mcp_tools.py": 40.0,
    "tests/integration/matrix/test_matrix_channel.py": 40.0,
    "tests/integration/test_sandbox.py": 20.0,
    "tests/integration/test_redis_waits.py": 20.0,
    "tests/integration/test_nothing_silent.py": 15.0,
    "tests/fuzz/test_fuzz_commands.py": 40.0,
    "tests/unit/test_chunking.py": 25.0,
    "tests/unit/test_cli_help.py": 15.0,
    "tests/conformance/test_conformance.py": 25.0,
}


def _file_seconds(path: Path, items: list[pytest.Item]) -> float:
    """A rough guess at how long a file's tests take: seconds per end-to-end test (they
    start processes), a tenth of one per other test, or the figure in SLOW_FILES."""
    name = path.relative_to(TESTS.parent).as_posix() if path.is_relative_to(TESTS.parent) else ""
    if name in SLOW_FILES:
        return SLOW_FILES[name]
    unit = name.startswith("tests/unit/")
    return sum(8.0 if i.get_closest_marker("e2e") and not unit else 0.1 for i in items)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the end-to-end tests, then put the slowest files first: ``--dist loadfile``
    hands out whole files in this order (``--no-loadscope-reorder``), so a long file
    started last no longer runs alone at the end."""
    for item in items:
        if forks_processes(item):
            item.add_marker(pytest.mark.e2e)
    by_file: dict[Path, list[pytest.Item]] = {}
    for item in items:
        by_file.setdefault(item.path, []).append(item)
    cost = {path: _file_seconds(path, its) for path, its in by_file.items()}
    order = {path: i for i, path in enumerate(by_file)}
    items.sort(key=lambda item: (-cost[item.path], order[item.path]))


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(data_dir=Path(tmp_path_factory.mktemp("redis")))
    with server:
        yield server


@pytest.fixture
def redis_url(redis_server: RedisServer) -> Iterator[str]:
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    client.close()
    yield redis_server.url


@pytest.fixture
def rconn(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--pool",
        choices=("fork", "threads"),
        default=None,
        help="run every Stack's workers in this pool (default: each test's own choice)",
    )


BOTH_POOLS = (
    "tests/faults/",
    "tests/e2e/test_fan_in.py",
    "tests/e2e/test_fanout.py",
    "tests/e2e/test_tools_e2e.py",
    "tests/e2e/test_control_stop.py",
    "tests/e2e/test_control_send_archive.py",
    "tests/e2e/test_turn_stop.py",
    "tests/e2e/test_failures.py",
    "tests/e2e/test_slack_e2e.py",
    "tests/e2e/test_telegram_e2e.py",
    "tests/e2e/matrix/",
    "tests/e2e/test_model_endpoints.py",
    "tests/e2e/test_skills_sandbox_e2e.py",
    "tests/e2e/test_hooks_e2e.py",
    "tests/e2e/test_spec_gaps_e2e.py",
    "tests/e2e/test_chat_commands_e2e.py",
)
"""Modules whose end-to-end tests run under both worker pools (issue: the default pool
becomes threads once they all pass in both)."""


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Each test of :data:`BOTH_POOLS` that starts workers runs once per pool, unless
    ``--pool`` chose one for the whole run."""
    if metafunc.config.getoption("--pool") or "_stack_pool" not in metafunc.fixturenames:
        return
    path = Path(str(metafunc.definition.fspath)).relative_to(TESTS.parent).as_posix()
    starts_workers = any(hasattr(metafunc.module, name) for name in ("Stack", "WorkerPool"))
    if starts_workers and path.startswith(BOTH_POOLS):
        metafunc.parametrize("_stack_pool", ["fork", "threads"], indirect=True)


@pytest.fixture(autouse=True)
def _stack_pool(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pool of every ``Stack`` the test starts: ``--pool``, else this test's
    parameter (:func:`pytest_generate_tests`), else each Stack's own default (threads)."""
    pool = request.config.getoption("--pool") or getattr(request, "param", None)
    if pool:
        from bot.testing.stack import Stack

        monkeypatch.setattr(Stack, "default_pool", pool)
