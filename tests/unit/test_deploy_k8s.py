"""deploy/k8s/ validates offline and says what the docs and the code say.

- Every built-in resource validates against the Kubernetes JSON schemas that
  ``kubernetes-validate`` bundles (strict: an unknown field is an error), with the network
  shut off for the call.
- KEDA's ``ScaledObject`` and ``TriggerAuthentication`` validate against the
  ``openAPIV3Schema`` of KEDA's own CRDs, vendored in deploy/schemas/keda/, made strict the
  same way (the API server would prune, i.e. silently drop, an unknown field); the redis
  trigger's free-form metadata is checked against the scaler's documented parameters.
- Probes: ``/healthz`` for liveness, ``/readyz`` for readiness; requests and limits on
  every container; secrets only by reference; a PodDisruptionBudget for the workers; the
  workers' grace outlasts the launcher's shutdown; the gateway has a Service and its state
  directory a PersistentVolumeClaim; the Redis start script runs.
"""

from __future__ import annotations

import copy
import re
import socket
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import redis
import yaml
from rq import Queue

from bot.config import GatewaySettings
from bot.store.jobs import SUBAGENTS_QUEUE
from tests.cli_support import worker_options
from tests.unit.test_deploy_compose import launcher_stop_bound, redis_from_script, setting_exists

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
CRDS = ROOT / "deploy" / "schemas" / "keda"
DOCS = [
    (path.name, doc)
    for path in sorted(K8S.glob("*.yaml"))
    for doc in yaml.safe_load_all(path.read_text())
    if doc
]
BUILT_IN = [(name, doc) for name, doc in DOCS if not doc["apiVersion"].startswith("keda.sh/")]
KEDA = [(name, doc) for name, doc in DOCS if doc["apiVersion"].startswith("keda.sh/")]
# The oldest Kubernetes still commonly run, and the newest the package knows.
VERSIONS = ["1.28.0", kubernetes_validate.utils.latest_version()]
STATE_DIR = "/var/lib/fanbot"


def _ids(items: list[tuple[str, dict[str, Any]]]) -> list[str]:
    return [f"{name}:{doc['kind']}/{doc['metadata']['name']}" for name, doc in items]


def _one(kind: str, name: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [
        d for _, d in DOCS if d["kind"] == kind and d["metadata"]["name"] == name
    ]
    [doc] = found
    return doc


def _container(name: str) -> dict[str, Any]:
    pod = _one("Deployment", name)["spec"]["template"]["spec"]
    container: dict[str, Any] = pod["containers"][0]
    return container


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: Any, **__: Any) -> None:
        raise AssertionError("validation tried to use the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(("name", "doc"), BUILT_IN, ids=_ids(BUILT_IN))
def test_built_in_resources_validate_offline(
    name: str, doc: dict[str, Any], version: str, no_network: None
) -> None:
    kubernetes_validate.validate(doc, version, strict=True)


def _strict(schema: Any) -> Any:
    """The CRD schema with unknown fields refused where it lists the known ones."""
    if isinstance(schema, dict):
        schema = {k: _strict(v) for k, v in schema.items()}
        if "properties" in schema and "additionalProperties" not in schema:
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


def _crd_schema(kind: str, version: str) -> dict[str, Any]:
    for path in CRDS.glob("*.yaml"):
        crd = yaml.safe_load(path.read_text())
        if crd["spec"]["names"]["kind"] == kind:
            [v] = [v for v in crd["spec"]["versions"] if v["name"] == version]
            assert v["served"], (kind, version)
            schema: dict[str, Any] = _strict(copy.deepcopy(v["schema"]["openAPIV3Schema"]))
            return schema
    raise LookupError(kind)


@pytest.mark.parametrize(("name", "doc"), KEDA, ids=_ids(KEDA))
def test_keda_resources_validate_against_the_vendored_crds(name: str, doc: dict[str, Any]) -> None:
    schema = _crd_schema(doc["kind"], doc["apiVersion"].split("/")[1])
    jsonschema.Draft7Validator(schema).validate(doc)


def test_the_strict_crd_schema_catches_a_misspelt_field() -> None:
    doc = copy.deepcopy(_one("ScaledObject", "fanbot-worker"))
    doc["spec"]["maxReplicas"] = doc["spec"].pop("maxReplicaCount")
    with pytest.raises(jsonschema.ValidationError, match="maxReplicas"):
        jsonschema.Draft7Validator(_crd_schema("ScaledObject", "v1alpha1")).validate(doc)


# KEDA's redis scaler (keda.sh/docs/scalers/redis-lists): its parameters, and the one-of.
REDIS_SCALER_KEYS = {
    "address", "addressFromEnv", "host", "hostFromEnv", "port", "portFromEnv",
    "username", "usernameFromEnv", "passwordFromEnv", "listName", "listLength",
    "activationListLength", "databaseIndex", "enableTLS", "unsafeSsl",
}  # fmt: skip


def test_keda_scales_the_workers_on_the_subagents_queue() -> None:
    scaled = _one("ScaledObject", "fanbot-worker")["spec"]
    assert scaled["scaleTargetRef"]["name"] == "fanbot-worker"
    assert _one("Deployment", scaled["scaleTargetRef"]["name"])
    [trigger] = scaled["triggers"]
    meta = trigger["metadata"]
    assert trigger["type"] == "redis" and set(meta) <= REDIS_SCALER_KEYS
    assert meta["listName"] == Queue.redis_queue_namespace_prefix + SUBAGENTS_QUEUE
    assert meta["listName"] == "rq:queue:subagents"
    assert int(meta["listLength"]) >= 1
    service = _one("Service", "fanbot-redis")
    assert meta["address"] == f"fanbot-redis:{service['spec']['ports'][0]['port']}"
    assert scaled["minReplicaCount"] >= 1  # turns run on the same workers
    assert scaled["maxReplicaCount"] >= scaled["minReplicaCount"]
    auth = _one("TriggerAuthentication", trigger["authenticationRef"]["name"])
    [ref] = auth["spec"]["secretTargetRef"]
    assert ref["parameter"] == "password"
    assert _env(_container("fanbot-worker"))["REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
        "name": ref["name"],
        "key": ref["key"],
    }


def _env(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


def _pod_specs() -> list[tuple[str, dict[str, Any]]]:
    return [
        (doc["metadata"]["name"], doc["spec"]["template"]["spec"])
        for _, doc in DOCS
        if doc["kind"] in ("Deployment", "StatefulSet")
    ]


@pytest.mark.parametrize("name", ["fanbot-gateway", "fanbot-worker"])
def test_probes_use_healthz_for_liveness_and_readyz_for_readiness(name: str) -> None:
    container = _container(name)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = container[probe]["httpGet"]
        assert get["path"] == path and get["port"] in ports, (probe, get)
    assert container["startupProbe"]["httpGet"]["path"] == "/healthz"


def test_the_worker_serves_its_probes_on_the_pod_address() -> None:
    container = _container("fanbot-worker")
    assert container["args"][0] == "worker"
    args = worker_options(container["args"][1:])  # what `fanbot worker` accepts
    assert args.metrics_host == "0.0.0.0"  # the kubelet probes the pod's IP, not loopback
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": args.metrics_port}


def _quantity(value: str | int) -> float:
    units = {"m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(m|Ki|Mi|Gi)?", str(value))
    assert match, value
    return float(match[1]) * units.get(match[2] or "", 1)


def test_every_container_has_requests_and_limits() -> None:
    for name, spec in _pod_specs():
        for container in spec["containers"]:
            resources = container["resources"]
            for resource in ("cpu", "memory"):
                request = _quantity(resources["requests"][resource])
                assert request <= _quantity(resources["limits"][resource]), (name, resource)


def test_secrets_are_only_referenced() -> None:
    for name, spec in _pod_specs():
        for container in spec["containers"]:
            for source in container.get("envFrom", []):
                assert set(source) == {"secretRef"}, name
            for var in container.get("env", []):
                if re.search(r"PASSWORD|TOKEN|SECRET|API_KEY", var["name"]):
                    assert "secretKeyRef" in var["valueFrom"], (name, var["name"])
                assert "@" not in var.get("value", "") or ":$(REDIS_PASSWORD)@" in var["value"]
    assert not [d for _, d in DOCS if d["kind"] == "Secret"]


def test_every_fanbot_setting_named_is_a_setting() -> None:
    names = {e["name"] for _, s in _pod_specs() for c in s["containers"] for e in c.get("env", [])}
    fanbot = {n for n in names if n.startswith("FANBOT_")}
    assert fanbot and {n for n in fanbot if not setting_exists(n)} == set()


def test_workers_outlast_the_launchers_shutdown_and_have_a_disruption_budget() -> None:
    worker = _one("Deployment", "fanbot-worker")
    assert worker["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > (
        launcher_stop_bound()
    )
    budget = _one("PodDisruptionBudget", "fanbot-worker")["spec"]
    assert budget["selector"] == worker["spec"]["selector"]
    assert budget["maxUnavailable"] == 1


def test_the_gateway_has_a_service_and_listens_on_every_interface() -> None:
    container = _container("fanbot-gateway")
    env = _env(container)
    assert env["FANBOT_GATEWAY__HTTP_HOST"]["value"] == "0.0.0.0"
    port = int(env["FANBOT_GATEWAY__HTTP_PORT"]["value"])
    assert port == GatewaySettings().http_port
    service = _one("Service", "fanbot-gateway")["spec"]
    labels = _one("Deployment", "fanbot-gateway")["spec"]["template"]["metadata"]["labels"]
    assert service["selector"] == labels
    [svc_port] = service["ports"]
    assert svc_port["targetPort"] == "http"
    assert {"name": "http", "containerPort": port} in container["ports"]


def test_the_gateway_state_dir_is_on_a_claim_writable_by_the_image_user() -> None:
    gateway = _one("Deployment", "fanbot-gateway")["spec"]
    spec = gateway["template"]["spec"]
    container = spec["containers"][0]
    assert _env(container)["FANBOT_STATE_DIR"]["value"] == STATE_DIR
    [mount] = [m for m in container["volumeMounts"] if m["mountPath"] == STATE_DIR]
    [volume] = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    assert _one("PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"])
    assert spec["securityContext"]["fsGroup"] == 10001  # the Dockerfile's USER
    assert "USER 10001:10001" in (ROOT / "deploy" / "Dockerfile").read_text()
    assert gateway["strategy"] == {"type": "Recreate"}  # one pod on the store at a time


def test_the_redis_start_script_runs(tmp_path: Path) -> None:
    redis_spec = _one("StatefulSet", "fanbot-redis")["spec"]["template"]["spec"]
    container = redis_spec["containers"][0]
    assert "secretKeyRef" in _env(container)["REDIS_PASSWORD"]["valueFrom"]
    env = {"REDIS_PASSWORD": "cd" * 16}
    with redis_from_script(container["command"][-1], tmp_path=tmp_path, env=env) as port:
        client = redis.Redis(port=port, password=env["REDIS_PASSWORD"], socket_timeout=2)
        assert client.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
        assert client.config_get("appendonly") == {"appendonly": "yes"}
        maxmemory = int(str(client.config_get("maxmemory")["maxmemory"]))
        client.close()
    assert 0 < maxmemory < _quantity(container["resources"]["limits"]["memory"]) * 0.8
