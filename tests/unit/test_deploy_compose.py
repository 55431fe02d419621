"""deploy/compose.yaml, deploy/.env.example and deploy/Dockerfile run as they are.

- The compose file validates against the Compose Specification's JSON schema (vendored in
  deploy/schemas/), and ``docker compose config`` accepts it where Compose v2 is installed
  (only that check is skipped elsewhere, saying why).
- The gateway listens on 0.0.0.0 in its container; every service has a health check (the
  gateway's and the workers' on ``/readyz``, Redis's an authenticated ``PING``); workers
  scale (no fixed name or published port); Redis has AOF, ``noeviction`` and a password
  that ``FANBOT_REDIS_URL`` carries. The Redis start script itself runs against a real
  ``redis-server``.
- The image's state directory is a volume, the gateway mounts one there, and it is where
  the Matrix store goes by default.
- Every ``FANBOT_*`` name in ``.env.example`` is a setting; each platform section loads.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import time
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import redis
import yaml
from pydantic import BaseModel
from redis.backoff import NoBackoff
from redis.retry import Retry

from bot.config import GatewaySettings, Settings, SubagentSettings, load_settings
from bot.redis.server import find_redis_server
from tests.cli_support import worker_options

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
COMPOSE = DEPLOY / "compose.yaml"
ENV_EXAMPLE = DEPLOY / ".env.example"
DOCKERFILE = DEPLOY / "Dockerfile"
STATE_DIR = "/var/lib/fanbot"


def _compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())  # resolves the << merge
    return data


def _service(name: str) -> dict[str, Any]:
    service: dict[str, Any] = _compose()["services"][name]
    return service


def _test_command(service: dict[str, Any]) -> str:
    test = service["healthcheck"]["test"]
    return test if isinstance(test, str) else " ".join(test[1:])


def launcher_stop_bound() -> float:
    """How long ``fanbot worker`` may take to stop with the default settings (its
    ``_shutdown`` timeout: the shutdown grace + the hard-kill grace + 15 s)."""
    sub = SubagentSettings()
    return sub.shutdown_grace_seconds + sub.hard_kill_grace_seconds + 15


def _seconds(value: str) -> float:
    match = re.fullmatch(r"(\d+)(s|m)", value)
    assert match, value
    return int(match[1]) * (60 if match[2] == "m" else 1)


def setting_exists(name: str) -> bool:
    """Whether ``FANBOT_A__B`` names a setting (``__`` nests into sections)."""
    model: type[BaseModel] | None = Settings
    for part in name.removeprefix("FANBOT_").lower().split("__"):
        if model is None or part not in model.model_fields:
            return False
        annotation = model.model_fields[part].annotation
        candidates = (annotation, *typing.get_args(annotation))
        model = next(
            (c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None
        )
    return True


# -- compose ----------------------------------------------------------------------------


def test_docker_compose_config_accepts_the_file(tmp_path: Path) -> None:
    docker = shutil.which("docker")
    probe = subprocess.run(
        [docker or "docker", "compose", "version"], capture_output=True, text=True, check=False
    ) if docker else None  # fmt: skip
    if probe is None or probe.returncode != 0:
        pytest.skip("Docker Compose v2 (`docker compose`) is not installed here")
    project = tmp_path / "deploy"
    project.mkdir()
    shutil.copy(COMPOSE, project / "compose.yaml")
    shutil.copy(ENV_EXAMPLE, project / ".env")
    result = subprocess.run(
        [docker or "docker", "compose", "-f", str(project / "compose.yaml"), "config", "-q"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def _spec_validator() -> jsonschema.Draft7Validator:
    schema = json.loads((DEPLOY / "schemas" / "compose-spec.json").read_text())
    return jsonschema.Draft7Validator(schema)


def test_the_file_validates_against_the_compose_specification_schema() -> None:
    _spec_validator().validate(_compose())


def test_the_compose_schema_catches_a_misspelt_key() -> None:
    compose = _compose()
    compose["services"]["worker"]["stop_grace_perod"] = "60s"
    with pytest.raises(jsonschema.ValidationError, match="stop_grace_perod"):
        _spec_validator().validate(compose)


def test_every_service_has_a_health_check() -> None:
    for name, service in _compose()["services"].items():
        assert service.get("healthcheck", {}).get("test"), name


def test_the_gateway_listens_on_every_interface_and_is_checked_on_readyz() -> None:
    gateway = _service("gateway")
    env = gateway["environment"]
    assert env["FANBOT_GATEWAY__HTTP_HOST"] == "0.0.0.0"
    port = int(env.get("FANBOT_GATEWAY__HTTP_PORT", GatewaySettings().http_port))
    assert any(p.endswith(f":{port}") for p in gateway["ports"])
    assert f"http://127.0.0.1:{port}/readyz" in _test_command(gateway)


def test_workers_scale_and_are_checked_on_their_metrics_port() -> None:
    worker = _service("worker")
    assert "container_name" not in worker and "ports" not in worker and "hostname" not in worker
    command = worker["command"]
    assert command[0] == "worker"
    args = worker_options(command[1:])  # what `fanbot worker` accepts
    assert args.metrics_host == "0.0.0.0"  # scrapable from the compose network
    assert f"http://127.0.0.1:{args.metrics_port}/readyz" in _test_command(worker)
    assert _seconds(worker["stop_grace_period"]) > launcher_stop_bound()
    assert "--scale worker=" in COMPOSE.read_text()


def test_fanbot_services_wait_for_a_healthy_redis_with_the_password() -> None:
    for name in ("gateway", "worker"):
        service = _service(name)
        assert service["depends_on"]["redis"]["condition"] == "service_healthy"
        url = service["environment"]["FANBOT_REDIS_URL"]
        assert re.fullmatch(r"redis://:\$\{REDIS_PASSWORD[^}]*\}@redis:6379/0", url), url


def test_redis_is_durable_bounded_and_needs_the_password() -> None:
    redis_service = _service("redis")
    script = redis_service["command"][-1]
    for line in (
        "requirepass $$REDIS_PASSWORD",
        "appendonly yes",
        "appendfsync everysec",
        "maxmemory-policy noeviction",
    ):
        assert line in script.splitlines(), line
    assert redis_service["environment"]["REDIS_PASSWORD"].startswith("${REDIS_PASSWORD:?")
    check = _test_command(redis_service)
    assert "redis-cli ping" in check and 'REDISCLI_AUTH="$$REDIS_PASSWORD"' in check
    assert any(v.endswith(":/data") for v in redis_service["volumes"])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def redis_from_script(script: str, *, tmp_path: Path, env: dict[str, str]) -> Iterator[int]:
    """Run a deploy file's Redis start script with a real redis-server; yields its port.

    The image's ``docker-entrypoint.sh`` is stood in for by one that appends a free port
    and a data directory under ``tmp_path``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "redis-server").symlink_to(find_redis_server())
    port = _free_port()
    shim = bin_dir / "docker-entrypoint.sh"
    shim.write_text(f'#!/bin/sh\nexec "$@" --port {port} --dir {tmp_path} --bind 127.0.0.1\n')
    shim.chmod(0o755)
    if "docker-entrypoint.sh" not in script:  # Kubernetes runs redis-server directly
        script = script.replace("exec redis-server -", "exec docker-entrypoint.sh redis-server -")
    path = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    proc = subprocess.Popen(["sh", "-c", script], env={**env, "PATH": path})
    # One attempt per probe: redis-py >= 6 retries a refused connection for ~4 s.
    client = redis.Redis(
        port=port, password=env["REDIS_PASSWORD"], socket_timeout=2, retry=Retry(NoBackoff(), 0)
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                assert proc.poll() is None, f"redis-server exited with {proc.returncode}"
                assert time.monotonic() < deadline, "redis-server did not answer"
                time.sleep(0.05)
        yield port
    finally:
        client.close()
        proc.terminate()
        proc.wait(10)


def test_the_redis_start_script_runs(tmp_path: Path) -> None:
    script = _service("redis")["command"][-1].replace("$$", "$")
    env = {"REDIS_PASSWORD": "pw-" + "ab" * 8, "REDIS_MAXMEMORY": "100mb"}
    with redis_from_script(script, tmp_path=tmp_path, env=env) as port:
        client = redis.Redis(port=port, password=env["REDIS_PASSWORD"], socket_timeout=2)
        assert client.config_get("appendonly") == {"appendonly": "yes"}
        assert client.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
        assert client.config_get("maxmemory") == {"maxmemory": str(100 * 2**20)}
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(port=port, socket_timeout=2, retry=Retry(NoBackoff(), 0)).ping()
        client.close()
        cli = shutil.which("redis-cli")
        if cli:  # the health check as compose runs it ($$ unescaped)
            check = _test_command(_service("redis")).replace("$$", "$")
            check = check.replace("redis-cli ping", f"{cli} -p {port} ping")
            assert subprocess.run(["sh", "-c", check], env=env, check=False).returncode == 0
            bad = {**env, "REDIS_PASSWORD": "wrong"}
            assert subprocess.run(["sh", "-c", check], env=bad, check=False).returncode != 0


def test_the_gateway_keeps_its_state_on_a_volume() -> None:
    gateway = _service("gateway")
    assert gateway["environment"]["FANBOT_STATE_DIR"] == STATE_DIR
    volume = next(v for v in gateway["volumes"] if v.endswith(f":{STATE_DIR}"))
    assert volume.split(":")[0] in _compose()["volumes"]  # named: survives `down`/`up`
    # Scaled workers get a tmpfs there, not an anonymous volume each.
    assert _service("worker")["tmpfs"] == [STATE_DIR]


# -- Dockerfile -------------------------------------------------------------------------


def test_the_image_declares_its_state_dir_a_volume_owned_by_its_user() -> None:
    text = DOCKERFILE.read_text()
    assert f'VOLUME ["{STATE_DIR}"]' in text
    assert f"FANBOT_STATE_DIR={STATE_DIR}" in text
    assert re.search(rf"install -d -o fanbot -g fanbot -m 0700 {STATE_DIR}", text)
    assert re.search(r"^USER 10001", text, re.M)
    assert "FANBOT_GATEWAY__HTTP_HOST=0.0.0.0" in text
    # PID 1 reaps orphans and forwards SIGTERM to the launcher only.
    assert (
        'ENTRYPOINT ["tini", "--", "fanbot"]' in text
        and "install -y --no-install-recommends tini" in text
    )


def test_the_matrix_store_defaults_into_the_state_dir() -> None:
    source = (ROOT / "adapters" / "matrix" / "__init__.py").read_text()
    assert 'settings.state_dir / "matrix"' in source


def test_the_build_context_is_filtered() -> None:
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text().split()
    assert ignore[ignore.index("*") :][:1] == ["*"]
    copied = re.findall(r"^COPY (\S+)", DOCKERFILE.read_text(), re.M)
    assert {f"!{c}" for c in copied} <= set(ignore)


# -- .env.example -----------------------------------------------------------------------

_ASSIGNMENT = re.compile(r"^#?\s*([A-Z][A-Z0-9_]*)=(.*)$")


def _sections() -> dict[str, list[tuple[str, str]]]:
    """``## Title`` -> its ``NAME=value`` lines, commented out or not."""
    sections: dict[str, list[tuple[str, str]]] = {}
    title = ""
    for line in ENV_EXAMPLE.read_text().splitlines():
        if line.startswith("## "):
            title = line[3:]
            sections[title] = []
        elif title and (m := _ASSIGNMENT.match(line)):
            sections[title].append((m[1], m[2].strip("'")))
    return sections


def test_every_fanbot_name_in_the_env_example_is_a_setting() -> None:
    names = set(re.findall(r"\bFANBOT_[A-Z0-9_]*[A-Z0-9]\b", ENV_EXAMPLE.read_text()))
    assert names and not {n for n in names if not setting_exists(n)}


def test_the_env_example_lists_what_each_platform_needs() -> None:
    names = {name for pairs in _sections().values() for name, _ in pairs}
    assert names >= {
        "FANBOT_OPENAI__API_KEY", "FANBOT_OPENAI__BASE_URL", "FANBOT_OPENAI__MODEL",
        "FANBOT_SLACK__BOT_TOKEN", "FANBOT_SLACK__APP_TOKEN", "FANBOT_SLACK__MODE",
        "FANBOT_SLACK__SIGNING_SECRET", "FANBOT_TELEGRAM__BOT_TOKEN",
        "FANBOT_TELEGRAM__WEBHOOK_URL", "FANBOT_TELEGRAM__WEBHOOK_SECRET",
        "FANBOT_MATRIX__HOMESERVER", "FANBOT_MATRIX__USER_ID", "FANBOT_MATRIX__PASSWORD",
        "FANBOT_MATRIX__ACCESS_TOKEN", "REDIS_PASSWORD",
    }  # fmt: skip


PLATFORM_SECTIONS: dict[str, Callable[[Settings], bool]] = {
    "Slack, Socket Mode": lambda s: s.slack.configured and s.slack.mode == "socket",
    "Slack, HTTP events": lambda s: s.slack.configured and s.slack.mode == "http",
    "Telegram, long polling": lambda s: s.telegram.configured and not s.telegram.webhook_url,
    "Telegram, webhook": lambda s: s.telegram.configured and bool(s.telegram.webhook_url),
    "Matrix": lambda s: s.matrix.configured,
}


@pytest.mark.parametrize("title", PLATFORM_SECTIONS)
def test_each_platform_section_loads_and_configures_its_platform(
    title: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sections = {t.split(" (")[0]: pairs for t, pairs in _sections().items()}
    for key in list(os.environ):
        if key.startswith(("FANBOT_", "OPENAI_")):
            monkeypatch.delenv(key)
    monkeypatch.setenv("FANBOT_CONFIG", os.devnull)
    for name, value in [*sections["OpenAI-compatible model endpoint"], *sections[title]]:
        if name.startswith("FANBOT_"):
            monkeypatch.setenv(name, value)
    assert PLATFORM_SECTIONS[title](load_settings())
