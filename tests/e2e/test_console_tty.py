"""`fanbot console` in a real terminal (a pty driven by pexpect), as a newcomer uses it.

No model is configured, so the offline demo model answers; ``compare …`` fans out to three
subagents, and ``FANBOT_DEMO_SUBAGENT_DELAY`` keeps them running long enough to press
Ctrl-C on them. Every wait is on a condition (text on the screen, a process gone).
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pexpect
import psutil
import pytest

from bot.testing.stack import hermetic_env

pytestmark = pytest.mark.timeout(60)

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b[=>]|\x1b\][^\x07]*\x07|\r")
COLUMNS = 250  # wide enough that rich wraps none of the lines asserted on


class Tty:
    """One console process on a pty, with its output as plain text."""

    def __init__(self, state: Path, **env: str) -> None:
        full = hermetic_env({"state_dir": str(state)})
        # No cursor-position answers come from pexpect; without this prompt-toolkit waits
        # for them and warns (a real terminal answers).
        full.update(TERM="xterm-256color", PROMPT_TOOLKIT_NO_CPR="1", **env)
        self.child = pexpect.spawn(
            sys.executable,
            ["-c", "from bot.cli import main; main()", "console", "--workers", "3"],
            env=full,
            encoding="utf-8",
            codec_errors="replace",
            dimensions=(50, COLUMNS),
            timeout=30,
        )
        self.raw = ""

    @property
    def text(self) -> str:
        return _ANSI.sub("", self.raw)

    def _read(self, timeout: float) -> bool:
        """Read what is there (up to ``timeout`` s); False at end of output."""
        try:
            self.raw += self.child.read_nonblocking(1 << 16, timeout=timeout)
        except pexpect.TIMEOUT:
            pass
        except pexpect.EOF:
            return False
        return True

    def wait_for(self, text: str, *, times: int = 1, timeout: float = 30) -> None:
        """Read until ``text`` was shown (``times`` times)."""
        deadline = time.monotonic() + timeout
        while self.text.count(text) < times:
            more = self._read(0.1)
            if self.text.count(text) >= times:
                return
            if not more or time.monotonic() > deadline:
                raise AssertionError(f"{text!r} not shown; the screen so far:\n{self.text[-3000:]}")

    def type(self, line: str) -> None:
        self.child.send(line + "\r")

    def paste(self, text: str, *, chunk: int = 4096) -> None:
        """Paste as a terminal does (bracketed paste), draining output between chunks."""
        data = f"\x1b[200~{text}\x1b[201~"
        for start in range(0, len(data), chunk):
            self.child.send(data[start : start + chunk])
            self._read(0)

    def wait_exit(self, *, timeout: float = 30) -> int:
        deadline = time.monotonic() + timeout
        while self.child.isalive():
            assert time.monotonic() < deadline, f"console still running:\n{self.text[-2000:]}"
            self._read(0.05)
        while self._read(0.05):  # the rest of the output
            pass
        self.child.close()
        status = self.child.exitstatus
        assert status is not None, f"killed by signal {self.child.signalstatus}"
        return int(status)

    def descendants(self) -> list[psutil.Process]:
        return psutil.Process(self.child.pid).children(recursive=True)

    def close(self) -> None:
        if self.child.isalive():
            self.child.terminate(force=True)


@pytest.fixture
def consoles() -> Iterator[list[Tty]]:
    made: list[Tty] = []
    yield made
    for tty in made:
        tty.close()


def alive(procs: list[psutil.Process]) -> list[str]:
    out = []
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(f"{proc.pid} {' '.join(proc.cmdline()[:6])}")
        except psutil.Error:
            continue
    return out


def launched_by(pids: set[int]) -> list[str]:
    """Live processes whose command line names one of ``pids`` as their parent (workers
    and their forked horses name the launcher; the launcher names the console)."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmd = proc.info["cmdline"] or []
        if _parent_pid(cmd) in pids:
            found.append(f"{proc.info['pid']} {' '.join(cmd[:6])}")
    return found


def _parent_pid(cmd: list[str]) -> int | None:
    try:
        return int(cmd[cmd.index("--parent-pid") + 1])
    except (ValueError, IndexError):
        return None


def stop_notes(out: str) -> list[str]:
    """Who stopped each run, from its announce's Notes. A run at a step boundary when the
    stop flag is set may finalize itself first ("stopped on request after 1 step(s)");
    that counts as the same stop."""
    found = re.findall(r"Notes: stopped (?:by (.+?) (?:after|before)|(on request))", out)
    return [by or "on request" for by, _ in found]


def test_ctrl_c_stops_three_runs_and_every_process(tmp_path: Path, consoles: list[Tty]) -> None:
    tty = Tty(tmp_path / "state", FANBOT_DEMO_SUBAGENT_DELAY="30")
    consoles.append(tty)
    tty.wait_for("type a message")
    tty.type("compare redis streams and kafka")
    tty.wait_for("Started 3 subagents")
    tree = tty.descendants()
    assert any("redis-server" in " ".join(p.cmdline()) for p in tree)

    pressed = time.monotonic()
    tty.child.sendintr()
    # The combined answer the fan-in will bring is still to come: "fanbot's answer".
    tty.wait_for(
        "Stopping fanbot's answer, 3 runs and the workers… (Ctrl-C again to force)", timeout=5
    )
    status = tty.wait_exit(timeout=15)
    took = time.monotonic() - pressed
    print(f"Ctrl-C to exit: {took:.2f}s")

    assert status == 130
    out = tty.text
    for label in ("Research", "Outline", "Review"):
        assert f'"{label}" (general-purpose) was stopped' in out, out[-3000:]
    assert out.count("Status: stopped") == 3
    notes = stop_notes(out)
    assert len(notes) == 3 and set(notes) <= {"Ctrl-C in the console", "on request"}, notes
    assert took < 5, f"Ctrl-C took {took:.2f}s"
    assert alive(tree) == []
    assert launched_by({tty.child.pid, *(p.pid for p in tree)}) == []


def test_a_refresh_still_reading_at_ctrl_c_does_not_hold_the_exit(
    tmp_path: Path, consoles: list[Tty]
) -> None:
    """The live area's first refresh is held in its thread (a failpoint) while Ctrl-C
    closes everything. Its task is cancelled but its Redis read goes on; had the private
    Redis stopped under it, the read would retry for ~35 s and the process could not exit."""
    tty = Tty(tmp_path / "state", FANBOT_FAILPOINTS="console.live=sleep(1.5)")
    consoles.append(tty)
    tty.wait_for("type a message")
    tty.child.sendintr()
    tty.wait_for("(Ctrl-C again to force)", timeout=5)
    tty.child.sendintr()
    tty.wait_for("Forcing: killing whatever still runs.", timeout=5)
    assert tty.wait_exit(timeout=20) == 130
    assert "Forced to stop" in tty.text


def test_a_long_paste_arrives_as_one_message(tmp_path: Path, consoles: list[Tty]) -> None:
    tty = Tty(tmp_path / "state", FANBOT_DEMO_SUBAGENT_DELAY="30")
    consoles.append(tty)
    tty.wait_for("type a message")
    body = "\n".join(f"line {i:05d}: " + "lorem ipsum dolor sit amet " * 3 for i in range(2_000))
    paste = (body + "\n" + "END")[:44_997] + "END"
    assert len(paste) == 45_000
    tty.paste(paste)
    tty.type("")
    # Longer than gateway.max_inbound_chars (32,000): the notice says what arrived.
    tty.wait_for("Your message was 45,000 characters long; I read only the first 32,000.")
    # Each demo task quotes the 32,000 characters: over a task's 20,000, so every spawn is
    # refused, and the answer says so (it used to say "Started 3 subagents").
    tty.wait_for("No subagent started: all refused:")
    tty.child.sendintr()
    assert tty.wait_exit() == 130
    out = tty.text
    assert out.count("Your message was") == 1  # one message, not 4,095-character pieces
    assert out.count("No subagent started") == 1
    assert out.count("at most 20,000 are allowed") == 3
    assert "Started" not in out


def test_unknown_commands_are_answered_not_sent_to_the_model(
    tmp_path: Path, consoles: list[Tty]
) -> None:
    tty = Tty(tmp_path / "state")
    consoles.append(tty)
    tty.wait_for("type a message")
    tty.type("/foo")
    tty.wait_for("Unknown command /foo. Try /help.")
    tty.type(":thread")
    tty.wait_for("Usage: :thread NAME switches to another thread")
    tty.type(":threads")  # the console's own: it lists, the model never sees it
    tty.wait_for("Threads (:thread NAME switches; * is this one):")
    tty.wait_for("main — 0 messages, no runs")
    tty.type("/start")  # what Telegram sends first: the help
    tty.wait_for("/subagents list — runs started in this thread")
    tty.type("hi")  # a turn after them: any turn they had queued would have answered first
    tty.wait_for("Hi! I'm fanbot running the offline demo model")
    tty.child.sendeof()
    assert tty.wait_exit() == 0
    assert "Subagent" not in tty.text
    assert "Started" not in tty.text


def test_a_second_console_on_the_same_state_is_refused(tmp_path: Path, consoles: list[Tty]) -> None:
    state = tmp_path / "state"
    first = Tty(state)
    consoles.append(first)
    first.wait_for("type a message")

    second = Tty(state)
    consoles.append(second)
    second.wait_for(f"Another fanbot console is using {state} (pid {first.child.pid}); use ")
    assert second.wait_exit() == 2
    assert "type a message" not in second.text

    first.type("hi")  # its Redis and workers are untouched
    first.wait_for("Hi! I'm fanbot running the offline demo model")
    first.child.sendeof()
    assert first.wait_exit() == 0


def test_closing_the_terminal_stops_everything_and_keeps_the_announces(
    tmp_path: Path, consoles: list[Tty]
) -> None:
    state = tmp_path / "state"
    tty = Tty(state, FANBOT_DEMO_SUBAGENT_DELAY="30")
    consoles.append(tty)
    tty.wait_for("type a message")
    tty.type("compare redis streams and kafka")
    tty.wait_for("Started 3 subagents")
    tree = [psutil.Process(tty.child.pid), *tty.descendants()]

    tty.child.ptyproc.fileobj.close()  # the window closes: SIGHUP, and the tty is gone
    deadline = time.monotonic() + 15
    while alive(tree):
        assert time.monotonic() < deadline, alive(tree)
        time.sleep(0.05)
    tty.child.close()

    again = Tty(state)  # the announces nobody could see are printed by the next console
    consoles.append(again)
    again.wait_for("Status: stopped", times=3)
    again.wait_for("runtime", times=3)
    for label in ("Research", "Outline", "Review"):
        assert f'"{label}" (general-purpose) was stopped' in again.text
    notes = stop_notes(again.text)
    assert len(notes) == 3 and set(notes) <= {"the console's terminal closing", "on request"}
    again.child.sendeof()
    assert again.wait_exit() == 0


def test_ctrl_d_says_what_it_waits_for_and_a_second_ctrl_c_forces(
    tmp_path: Path, consoles: list[Tty]
) -> None:
    tty = Tty(tmp_path / "state", FANBOT_DEMO_SUBAGENT_DELAY="30")
    consoles.append(tty)
    tty.wait_for("type a message")
    tty.type("compare redis streams and kafka")
    tty.wait_for("Started 3 subagents")
    tree = tty.descendants()
    tty.child.sendeof()
    tty.wait_for("Waiting for fanbot's answer and 3 runs… Ctrl-C to stop them")
    tty.child.sendintr()  # the prompt is gone: the terminal sends SIGINT now
    tty.wait_for("Stopping fanbot's answer, 3 runs and the workers… (Ctrl-C again to force)")
    tty.child.sendintr()
    tty.wait_for("Forcing: killing whatever still runs.")
    assert tty.wait_exit(timeout=10) == 130
    assert alive(tree) == []
