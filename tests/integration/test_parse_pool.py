"""Page and PDF parsing in helper processes (:mod:`bot.supervise.procpool`), as a
threads-pool run does it: real spawned processes, real timeouts and kills."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import psutil
import pypdf
import pytest

from bot.agent.tools.extract import PARSERS, readable
from bot.errors import ToolError
from bot.supervise.abort import Abort, Aborted, running
from bot.supervise.procpool import HelperFailed, ProcessPool
from tests import pool_probe

ROOT = Path(__file__).parents[2]
PAGE = (
    b"<html><head><title>Otters</title></head><body><nav>Home</nav><article><h1>Rafting</h1>"
    + b"<p>Sea otters hold hands while they sleep so that they do not drift apart.</p>" * 50
    + b"</article><footer>Privacy</footer></body></html>"
)
HEAVY = ("pydantic", "redis", "rq", "openai", "httpx", "bot.agent", "bot.cli.root", "bot.store")


@pytest.fixture
def pool() -> Iterator[ProcessPool]:
    made = ProcessPool(name="test helper", processes=2)
    yield made
    made.shutdown()


@pytest.fixture(autouse=True, scope="module")
def _parsers_end() -> Iterator[None]:
    yield
    PARSERS.shutdown()


def read(body: bytes, content_type: str, *, timeout: float = 30.0) -> str:
    return readable(
        body,
        content_type=content_type,
        charset=None,
        url="https://x.test/",
        complete=True,
        budget=10_000,
        timeout=timeout,
    )[1]


def gone(pid: int) -> bool:
    """Whether ``pid`` ends (or is a zombie) within 10 s: a kill lands a moment later."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def blank_pdf() -> bytes:
    writer = pypdf.PdfWriter()
    writer.add_blank_page(width=200, height=200)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def test_a_threads_pool_run_parses_in_a_helper_that_imports_only_the_parser() -> None:
    here = read(PAGE, "text/html")  # no current abort: parsed in this process
    assert PARSERS.pids() == []
    with running(Abort()):
        assert read(PAGE, "text/html") == here
        assert "hold hands" in here and "Privacy" not in here
        helpers = PARSERS.pids()
        assert helpers and os.getpid() not in helpers
        pid, modules = PARSERS.call(pool_probe.state, timeout=30)
    assert pid in helpers
    assert "trafilatura" in modules
    assert not [m for m in modules if m.startswith(HEAVY)]


def test_pdf_results_and_errors_come_back_as_they_are() -> None:
    with running(Abort()):
        assert read(blank_pdf(), "application/pdf") == (
            "(a PDF of 1 pages without extractable text: scanned images, perhaps)"
        )
        with pytest.raises(ToolError, match=r"^not a readable PDF"):
            read(b"%PDF-1.4\ngarbage", "application/pdf")
    assert PARSERS.pids()


def test_a_parse_that_takes_too_long_is_a_clear_tool_error() -> None:
    big = b"".join(b"<p>Paragraph %d about otters.</p>" % i for i in range(20_000))  # ~1 s
    page = b"<html><body><article>" + big + b"</article></body></html>"
    with running(Abort()), pytest.raises(ToolError, match=r"^could not read the page: the "):
        read(page, "text/html", timeout=0.2)


def test_a_call_over_its_timeout_is_cut_off_and_the_helpers_replaced(pool: ProcessPool) -> None:
    first = pool.call(partial(pool_probe.nap, 0), timeout=30)
    started = time.monotonic()
    with pytest.raises(HelperFailed, match=r"^the test helper took longer than 0.5s and was cut"):
        pool.call(partial(pool_probe.spin, 30), timeout=0.5)
    assert time.monotonic() - started < 3
    assert gone(first)
    assert pool.call(partial(pool_probe.nap, 0), timeout=30) != first


def test_a_helper_that_dies_is_a_clear_error_and_the_next_call_works(pool: ProcessPool) -> None:
    with pytest.raises(HelperFailed, match=r"^the test helper's process died before it finished"):
        pool.call(partial(os._exit, 3), timeout=30)
    assert pool.call(partial(pool_probe.nap, 0), timeout=30) > 0


def test_a_stopped_run_leaves_its_call_at_once(pool: ProcessPool) -> None:
    pool.call(partial(pool_probe.nap, 0), timeout=30)  # the helper is up
    stop = Abort()
    threading.Timer(0.3, stop.abort, args=("stopped on request",)).start()
    started = time.monotonic()
    with running(stop), pytest.raises(Aborted):
        pool.call(partial(pool_probe.spin, 30), timeout=60)
    assert time.monotonic() - started < 3
    assert pool.call(partial(pool_probe.nap, 0), timeout=30) > 0  # new helpers


def test_calls_killed_for_another_calls_timeout_are_made_again(pool: ProcessPool) -> None:
    two = threading.Barrier(2)
    warm = [threading.Thread(target=lambda: pool.call(partial(pool_probe.nap, 1.0), timeout=30))]
    warm[0].start()
    pool.call(partial(pool_probe.nap, 1.0), timeout=30)  # both helpers are up
    warm[0].join(30)
    outcome: list[object] = []

    def patient() -> None:
        two.wait(5)
        try:
            outcome.append(pool.call(partial(pool_probe.nap, 3.0), timeout=30))
        except Exception as exc:
            outcome.append(exc)

    thread = threading.Thread(target=patient)
    thread.start()
    two.wait(5)
    time.sleep(0.2)  # the patient call runs in the other helper
    with pytest.raises(HelperFailed, match="cut off"):
        pool.call(partial(pool_probe.spin, 30), timeout=1.0)
    thread.join(30)
    assert len(outcome) == 1 and isinstance(outcome[0], int), outcome


SCRIPT = """\
import re
import sys
from bot.cli import main
if __name__ == '__main__':
    import os
    from functools import partial
    from bot.supervise.procpool import ProcessPool
    from tests import pool_probe
    pool = ProcessPool(name="probe")
    pid, modules = pool.call(pool_probe.state, timeout=60)
    print(pid, *[m for m in modules if m.startswith({heavy!r})], flush=True)
    os._exit(0)  # as a worker ends: no atexit
"""


def test_under_the_fanbot_script_helpers_stay_small_and_end_with_their_parent(
    tmp_path: Path,
) -> None:
    """Python runs the parent's ``__main__`` script again in a spawned helper: the
    ``fanbot`` console script's import of :mod:`bot.cli` must stay cheap there."""
    script = tmp_path / "fanbot"
    script.write_text(SCRIPT.format(heavy=HEAVY))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 0, done.stderr
    pid, *heavy = done.stdout.split()
    assert heavy == []
    assert gone(int(pid)), "the helper outlived its parent"
