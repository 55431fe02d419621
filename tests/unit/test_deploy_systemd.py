"""deploy/systemd/: a restart is the workers' graceful shutdown, and the units are hardened.

- Worker units (``fanbot-worker.service`` and the template ``fanbot-worker@.service``)
  signal only the launcher (``KillMode=mixed``) and wait longer than it does.
- Every unit runs as ``fanbot`` with no capabilities, a read-only system, its state
  directory the one writable path, and the hardening ``systemd-analyze security`` scores;
  the worker keeps what bubblewrap (the execute tool's sandbox) needs and no more.
- The template gives each instance its own metrics port.
- Where ``systemd-analyze`` exists, ``verify`` passes and ``security`` scores each unit
  below 3.0 (9.2 before this hardening).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest

from tests.cli_support import worker_options
from tests.unit.test_deploy_compose import launcher_stop_bound

ROOT = Path(__file__).resolve().parents[2]
UNITS = ROOT / "deploy" / "systemd"
GATEWAY = UNITS / "fanbot-gateway.service"
WORKERS = [UNITS / "fanbot-worker.service", UNITS / "fanbot-worker@.service"]
STATE_DIR = "/var/lib/fanbot"

Unit = dict[str, dict[str, list[str]]]


def parse(path: Path) -> Unit:
    """``[Section]`` -> key -> every value it is given, in order (keys may repeat)."""
    unit: Unit = defaultdict(lambda: defaultdict(list))
    section = ""
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        unit[section][key].append(value)
    return unit


def service(path: Path) -> dict[str, list[str]]:
    return parse(path)["Service"]


def one(path: Path, key: str) -> str:
    [value] = service(path)[key]
    return value


def _seconds(value: str) -> float:
    match = re.fullmatch(r"(\d+)(s|min)?", value)
    assert match, value
    return int(match[1]) * (60 if match[2] == "min" else 1)


@pytest.mark.parametrize("path", WORKERS, ids=lambda p: p.name)
def test_a_worker_restart_is_the_launchers_graceful_shutdown(path: Path) -> None:
    assert one(path, "KillMode") == "mixed"
    assert one(path, "KillSignal") == "SIGTERM"
    assert _seconds(one(path, "TimeoutStopSec")) > launcher_stop_bound()
    program, command, *args = one(path, "ExecStart").replace("%i", "1").split()
    assert (Path(program).name, command) == ("fanbot", "worker")
    assert worker_options(args).metrics_port > 1024  # what `fanbot worker` takes


HARDENING = {
    "User": "fanbot",
    "NoNewPrivileges": "yes",
    "CapabilityBoundingSet": "",
    "AmbientCapabilities": "",
    "ProtectSystem": "strict",
    "ProtectHome": "yes",
    "PrivateTmp": "yes",
    "PrivateDevices": "yes",
    "PrivateMounts": "yes",
    "PrivateUsers": "yes",
    "ProtectHostname": "yes",
    "ProtectClock": "yes",
    "ProtectKernelModules": "yes",
    "ProtectControlGroups": "yes",
    "ProtectProc": "invisible",
    "RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6",
    "RestrictRealtime": "yes",
    "RestrictSUIDSGID": "yes",
    "LockPersonality": "yes",
    "SystemCallArchitectures": "native",
    "UMask": "0077",
}


@pytest.mark.parametrize("path", [GATEWAY, *WORKERS], ids=lambda p: p.name)
def test_every_unit_is_hardened(path: Path) -> None:
    got = {key: one(path, key) for key in HARDENING}
    assert got == HARDENING
    assert service(path)["SystemCallFilter"][0].split()[0] == "@system-service"
    # The state directory (the Matrix store) is the one writable path.
    assert one(path, "StateDirectory") == STATE_DIR.removeprefix("/var/lib/")
    assert one(path, "ReadWritePaths") == STATE_DIR
    assert one(path, "Environment") == f"FANBOT_STATE_DIR={STATE_DIR}"


def test_the_gateway_gets_the_rest_of_the_hardening() -> None:
    for key in ("ProtectKernelTunables", "ProtectKernelLogs", "MemoryDenyWriteExecute"):
        assert one(GATEWAY, key) == "yes", key
    assert one(GATEWAY, "RestrictNamespaces") == "yes"
    assert one(GATEWAY, "ProcSubset") == "pid"
    assert service(GATEWAY)["SystemCallFilter"][1:] == ["~@privileged @resources"]


# bwrap --unshare-all --unshare-user --disable-userns (bot/agent/tools/sandbox_proc.py).
BWRAP_NAMESPACES = {"user", "mnt", "pid", "net", "ipc", "uts", "cgroup"}


@pytest.mark.parametrize("path", WORKERS, ids=lambda p: p.name)
def test_the_worker_allows_what_bubblewrap_needs_and_says_why(path: Path) -> None:
    assert set(one(path, "RestrictNamespaces").split()) == BWRAP_NAMESPACES
    assert service(path)["SystemCallFilter"] == ["@system-service @mount sethostname"]
    # Over-mounts in /proc make the kernel refuse bwrap a new procfs: these stay off.
    for key in ("ProtectKernelTunables", "ProtectKernelLogs", "ProcSubset"):
        assert key not in service(path), key
    # Sandboxed commands inherit it, and JIT runtimes need W+X memory.
    assert "MemoryDenyWriteExecute" not in service(path)
    comments = re.sub(r"\s*\n#\s*", " ", path.read_text())  # comment lines joined
    assert "bubblewrap" in comments and "Can't mount proc" in comments
    source = (ROOT / "bot" / "agent" / "tools" / "sandbox_proc.py").read_text()
    assert '"--unshare-all", "--unshare-user", "--disable-userns"' in source
    assert '"--hostname", "sandbox"' in source  # sethostname


def test_the_template_scales_on_one_host_with_a_port_per_instance() -> None:
    template = WORKERS[1]
    assert template.name == "fanbot-worker@.service"
    exec_start = one(template, "ExecStart")
    ports = [int(re.search(r"--metrics-port (\S+)", exec_start)[1].replace("%i", str(i)))  # type: ignore[index]
             for i in range(1, 10)]  # fmt: skip
    assert len(set(ports)) == 9 and all(1024 < p < 65536 for p in ports)
    assert "fanbot-worker@{1..4}" in template.read_text()
    assert "%i" in parse(template)["Unit"]["Description"][0]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A --root for systemd-analyze: the host's own units, ours, and a stand-in binary."""
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed here")
    host_units = Path("/lib/systemd/system")
    if not (host_units / "sysinit.target").exists():
        pytest.skip("no systemd unit directory here to verify against")
    shutil.copytree(host_units, tmp_path / "usr/lib/systemd/system", symlinks=True)
    ours = tmp_path / "etc/systemd/system"
    ours.mkdir(parents=True)
    for path in [GATEWAY, *WORKERS]:
        shutil.copy(path, ours / path.name)
    binary = tmp_path / "opt/fanbot/.venv/bin/fanbot"
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    return tmp_path


INSTANCES = ["fanbot-gateway.service", "fanbot-worker.service", "fanbot-worker@1.service"]


def _analyze(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["systemd-analyze", *args], capture_output=True, text=True, check=False, timeout=60
    )


@pytest.mark.parametrize("unit", INSTANCES)
def test_systemd_analyze_verify_passes(root: Path, unit: str) -> None:
    result = _analyze("verify", f"--root={root}", unit)
    assert result.returncode == 0 and not result.stderr.strip(), result.stderr


@pytest.mark.parametrize("unit", INSTANCES)
def test_systemd_analyze_security_scores_it_ok(root: Path, unit: str) -> None:
    result = _analyze("security", "--offline=true", f"--root={root}", "--no-pager", unit)
    match = re.search(r"Overall exposure level for \S+: (\d+\.\d+) (\w+)", result.stdout)
    assert match, result.stdout + result.stderr
    assert float(match[1]) < 3.0 and match[2] == "OK", match[0]
