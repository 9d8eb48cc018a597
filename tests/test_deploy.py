"""The team recipe in deploy/: the Kubernetes manifests against the Kubernetes API schemas
(kubernetes-validate bundles them, so this runs offline), the compose files against the Compose
Specification's schema (check-jsonschema ships it), and deploy/compose.yaml with its
HAProxy configuration for the facts that make two replicas one gateway: one store, one audit
key, a name each, health checks, and a proxy over both. No container runtime is needed."""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from conftest import ROOT

from toolkeeper.config.loader import SETTINGS, parse_config_text

DEPLOY = ROOT / "deploy"
KUBERNETES = DEPLOY / "kubernetes"
COMPOSE = DEPLOY / "compose.yaml"
HAPROXY = DEPLOY / "haproxy.cfg"
CONFIG = DEPLOY / "toolkeeper.json"
# The oldest Kubernetes the manifests are written for, and the newest whose schemas the checker has.
KUBERNETES_VERSIONS = ("1.28.0", kubernetes_validate.latest_version())
GATEWAY_PORT = 8765
# Long enough for the gateway's minimum, as the person's `openssl rand -hex 32` would be.
AUDIT_KEY = "0" * 64
KNOWN_VARIABLES = {name for setting in SETTINGS for name in setting.env} | {"TOOLKEEPER_CONFIG"}


# Applied on its own, once its placeholders are replaced; kustomization.yaml applies the rest.
SECRET = "secret.yaml"


def manifests() -> dict[str, dict[str, Any]]:
    """Every Kubernetes object the recipe holds, by file name."""
    return {
        path.name: yaml.safe_load(path.read_text())
        for path in sorted(KUBERNETES.glob("*.yaml"))
        if path.name != "kustomization.yaml"
    }


def of_kind(kind: str) -> dict[str, Any]:
    [found] = [m for m in manifests().values() if m["kind"] == kind]
    return found


def gateway_container() -> dict[str, Any]:
    [container] = of_kind("Deployment")["spec"]["template"]["spec"]["containers"]
    return container


def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def interpolate(value: str, env: Mapping[str, str]) -> str:
    """Compose's `${NAME}`, `${NAME:-default}` and `${NAME:?error}` with `env`; a required name
    missing from `env` fails as compose would."""

    def one(match: re.Match[str]) -> str:
        name, operator, rest = match.group(1), match.group(2), match.group(3)
        if env.get(name):
            return env[name]
        if operator == ":-":
            return rest
        raise AssertionError(f"compose needs {name}: {rest}")

    return re.sub(r"\$\{([A-Z_]+)(?:(:-|:\?)([^}]*))?\}", one, value)


# --------------------------------------------------------------------------- Kubernetes


def test_kustomization_applies_every_manifest_but_the_secret() -> None:
    kustomization = yaml.safe_load((KUBERNETES / "kustomization.yaml").read_text())
    assert sorted(kustomization["resources"]) == sorted(set(manifests()) - {SECRET})
    assert manifests()[SECRET]["metadata"]["namespace"] == kustomization["namespace"]


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("name", sorted(manifests()))
def test_manifests_match_the_kubernetes_schemas(name: str, version: str) -> None:
    """Strict: a field Kubernetes does not know is refused, as a misspelt probe would be."""
    kubernetes_validate.validate(manifests()[name], version, strict=True)


def test_the_schema_check_refuses_a_misspelt_field() -> None:
    deployment = copy.deepcopy(of_kind("Deployment"))
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["readinesProbe"] = container.pop("readinessProbe")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSIONS[-1], strict=True)


def test_the_deployment_runs_two_replicas_probed_on_health_and_readiness() -> None:
    deployment = of_kind("Deployment")
    container = gateway_container()
    assert deployment["spec"]["replicas"] == 2
    [port] = container["ports"]
    assert port["containerPort"] == GATEWAY_PORT
    probes = {
        kind: container[kind]["httpGet"] for kind in ("startupProbe", "livenessProbe", "readinessProbe")
    }
    assert {kind: probe["path"] for kind, probe in probes.items()} == {
        "startupProbe": "/healthz",
        "livenessProbe": "/healthz",
        "readinessProbe": "/readyz",
    }
    for probe in probes.values():
        # The kubelet would name the pod by its address, which the gateway's Host check refuses.
        assert {"name": "Host", "value": "localhost"} in probe["httpHeaders"]
        assert probe["port"] == port["name"]


def test_the_secret_holds_the_store_and_the_audit_key_every_pod_reads() -> None:
    secret = of_kind("Secret")
    env = {item["name"]: item for item in gateway_container()["env"]}
    for variable, key in (("TOOLKEEPER_DATABASE_URL", "database-url"), ("TOOLKEEPER_AUDIT_KEY", "audit-key")):
        reference = env[variable]["valueFrom"]["secretKeyRef"]
        assert reference == {"name": secret["metadata"]["name"], "key": key}
        assert key in secret["stringData"]
    assert env["TOOLKEEPER_REPLICA"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert set(env) <= KNOWN_VARIABLES


def test_the_placeholder_audit_key_stops_the_gateway_rather_than_sign_with_it() -> None:
    from toolkeeper.config import ConfigError

    placeholder = of_kind("Secret")["stringData"]["audit-key"]
    with pytest.raises(ConfigError, match="audit key"):
        parse_config_text(CONFIG.read_text(), environ={"TOOLKEEPER_AUDIT_KEY": placeholder})


def test_the_service_and_the_budget_select_the_gateway_pods() -> None:
    pods = of_kind("Deployment")["spec"]["template"]["metadata"]["labels"]
    service = of_kind("Service")["spec"]
    assert service["selector"].items() <= pods.items()
    assert service["ports"][0]["targetPort"] == gateway_container()["ports"][0]["name"]
    assert of_kind("PodDisruptionBudget")["spec"]["selector"]["matchLabels"].items() <= pods.items()


def test_the_configuration_in_the_config_map_is_the_compose_one_and_loads() -> None:
    data = of_kind("ConfigMap")["data"]
    assert json.loads(data["toolkeeper.json"]) == json.loads(CONFIG.read_text())
    environ = {name: value for name, value in data.items() if name.startswith("TOOLKEEPER_")}
    assert set(environ) <= KNOWN_VARIABLES
    config = parse_config_text(
        data["toolkeeper.json"],
        environ={**environ, "TOOLKEEPER_AUDIT_KEY": AUDIT_KEY, "TOOLKEEPER_REPLICA": "toolkeeper-7d9c-x2k4q"},
    )
    assert config.settings.http_port == GATEWAY_PORT and config.settings.http_auth_mode == "keys"
    assert "toolkeeper" in config.settings.http_allowed_hosts


# --------------------------------------------------------------------------- compose


def replicas() -> dict[str, dict[str, Any]]:
    return {name: service for name, service in compose()["services"].items() if name.startswith("toolkeeper")}


@pytest.mark.parametrize("path", [COMPOSE, ROOT / "compose.yaml"], ids=["deploy", "root"])
def test_compose_files_match_the_compose_specification(path: Path) -> None:
    """The Compose Specification's schema, as check-jsonschema ships it: a misspelt key fails."""
    checked = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec", str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_compose_schema_check_refuses_a_misspelt_key(tmp_path: Path) -> None:
    broken = tmp_path / "compose.yaml"
    broken.write_text(COMPOSE.read_text().replace("    healthcheck:\n", "    healthchek:\n", 1))
    checked = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec", str(broken)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert checked.returncode == 1 and "healthchek" in checked.stdout


def test_compose_runs_two_replicas_on_one_store_with_one_audit_key_and_a_name_each() -> None:
    services = replicas()
    assert len(services) == 2
    env = {name: service["environment"] for name, service in services.items()}
    assert {name: values["TOOLKEEPER_REPLICA"] for name, values in env.items()} == {n: n for n in services}
    for values in env.values():
        assert values["TOOLKEEPER_DATABASE_URL"].startswith("postgresql://")
        assert "@postgres:5432/" in values["TOOLKEEPER_DATABASE_URL"]
        assert set(values) <= KNOWN_VARIABLES
        with pytest.raises(AssertionError, match="TOOLKEEPER_AUDIT_KEY"):
            interpolate(values["TOOLKEEPER_AUDIT_KEY"], {})
    [first, second] = env.values()
    assert {k: v for k, v in first.items() if k != "TOOLKEEPER_REPLICA"} == {
        k: v for k, v in second.items() if k != "TOOLKEEPER_REPLICA"
    }


def test_each_replica_waits_for_the_database_and_is_checked_on_readiness() -> None:
    for service in replicas().values():
        assert service["depends_on"]["postgres"]["condition"] == "service_healthy"
        check = " ".join(service["healthcheck"]["test"])
        assert f"http://127.0.0.1:{GATEWAY_PORT}/readyz" in check
        assert "ports" not in service  # reached through the proxy only
        assert "./toolkeeper.json:/config/toolkeeper.json:ro" in service["volumes"]
    assert "pg_isready" in " ".join(compose()["services"]["postgres"]["healthcheck"]["test"])


def test_each_replica_environment_loads_with_the_mounted_configuration() -> None:
    for name, service in replicas().items():
        environ = {
            key: interpolate(str(value), {"TOOLKEEPER_AUDIT_KEY": AUDIT_KEY})
            for key, value in service["environment"].items()
        }
        assert environ.pop("TOOLKEEPER_CONFIG") == "/config/toolkeeper.json"
        config = parse_config_text(CONFIG.read_text(), environ=environ)
        assert config.settings.replica == name
        assert config.settings.audit_key == AUDIT_KEY
        assert config.settings.database_url == environ["TOOLKEEPER_DATABASE_URL"]


def haproxy_backend() -> list[str]:
    """The lines of haproxy.cfg's `backend toolkeeper` section, stripped, comments left out."""
    lines: list[str] = []
    inside = False
    for raw in HAPROXY.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if raw and not raw[0].isspace():
            inside = line == "backend toolkeeper"
            continue
        if inside and line:
            lines.append(line)
    return lines


def test_the_proxy_balances_over_both_replicas_and_checks_their_readiness() -> None:
    proxy = compose()["services"]["proxy"]
    assert proxy["image"].startswith("haproxy:")
    assert "./haproxy.cfg:/usr/local/etc/haproxy/haproxy.cfg:ro" in proxy["volumes"]
    assert set(proxy["depends_on"]) == set(replicas())
    backend = haproxy_backend()
    servers = {line.split()[1]: line.split()[2] for line in backend if line.startswith("server ")}
    assert servers == {name: f"{name}:{GATEWAY_PORT}" for name in replicas()}
    assert "option httpchk" in backend
    assert any(
        line.startswith("http-check send meth GET uri /readyz") and "hdr Host localhost" in line
        for line in backend
    )
    assert any(line.startswith("default-server check") for line in backend)


def test_the_proxy_keeps_a_handshake_era_session_on_the_replica_that_opened_it() -> None:
    backend = haproxy_backend()
    assert "stick store-response res.hdr(mcp-session-id)" in backend
    assert "stick match req.hdr(mcp-session-id)" in backend
    assert "balance roundrobin" in backend


@pytest.mark.skipif(shutil.which("haproxy") is None, reason="HAProxy is not installed here")
def test_haproxy_accepts_its_configuration(tmp_path: Path) -> None:
    checked = subprocess.run(
        ["haproxy", "-c", "-f", str(HAPROXY)], capture_output=True, text=True, check=False, timeout=30
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
