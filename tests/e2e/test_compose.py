"""docker-compose.yml (docs/monitoring.md), validated without a Docker daemon: the compose implementation parses,
interpolates and checks the file against the compose schema (`docker compose config`, or Debian's
`docker-compose` package, installed here when missing), and the tests assert what an operator relies on:
healthchecks and their conditions, Redis's AOF and `noeviction`, a grace period longer than the default call
timeout, a worker service that scales, credentials for every published port. The workers' healthcheck
command is run as written against a real worker.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from agentq.settings import Settings
from tests.integration.procs import cli

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
CREDENTIALS = {"FLOWER_PASSWORD": "flower-secret", "AGENTQ_API_TOKENS": "api-token-1,api-token-2"}
AGENTQ_SERVICES = ("dispatcher", "worker", "api", "flower")
TRACING_SERVICES = ("otel-collector", "jaeger")  # the `tracing` profile (docs/tracing.md)


def _compose_command() -> list[str]:
    """A daemon-less `compose config`: the Docker CLI's compose plugin, else Debian's `docker-compose`
    (installed with apt-get when missing, as the tests of the web page install chromium)."""
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0:
        return [docker, "compose"]
    if shutil.which("docker-compose") is None and shutil.which("apt-get") and os.geteuid() == 0:
        install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "docker-compose"]
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        if subprocess.run(install, capture_output=True, env=env).returncode != 0:
            subprocess.run(["apt-get", "update", "-q"], capture_output=True, env=env)
            subprocess.run(install, capture_output=True, env=env)
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.fail("validating docker-compose.yml needs `docker compose` (the Docker CLI's compose plugin) or "
                    "`docker-compose` (Debian: apt-get install --no-install-recommends docker-compose)",
                    pytrace=False)
    return [binary]


@pytest.fixture(scope="module")
def compose() -> list[str]:
    return _compose_command()


def _config(compose: list[str], path: Path = COMPOSE_FILE, /, **env: str) -> subprocess.CompletedProcess:
    environment = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/tmp"), **env}
    return subprocess.run([*compose, "-f", str(path), "--project-directory", str(ROOT), "config"],
                          capture_output=True, text=True, env=environment, timeout=120)


@pytest.fixture(scope="module")
def config(compose: list[str]) -> dict:
    done = _config(compose, **CREDENTIALS)
    assert done.returncode == 0, done.stderr
    return yaml.safe_load(done.stdout)


def seconds(duration: str | int | float) -> float:
    """A compose duration (`16m`, `1h30m`, `960s`, `1m0.5s`, or a number of seconds) in seconds."""
    if isinstance(duration, int | float):
        return float(duration)
    units = {"h": 3600, "m": 60, "s": 1, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|us|µs|ns|h|m|s)", duration)
    assert parts and "".join(n + u for n, u in parts) == duration, f"not a duration: {duration!r}"
    return sum(float(n) * units[u] for n, u in parts)


def mounts(service: dict) -> dict[str, str]:
    """A service's volumes as mount point -> source (the short `source:target[:mode]` or the long form)."""
    found = {}
    for volume in service.get("volumes") or []:
        if isinstance(volume, str):
            source, target = volume.split(":")[:2]
        else:
            source, target = volume.get("source", ""), volume["target"]
        found[target] = source
    return found


def test_the_file_is_valid_and_names_its_services(config: dict):
    assert set(config["services"]) == {"redis", *AGENTQ_SERVICES, *TRACING_SERVICES}


def test_a_broken_file_is_refused(compose: list[str], tmp_path: Path):
    """The validation is real: a misspelt key and a wrong type are errors of the compose implementation."""
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(COMPOSE_FILE.read_text().replace("    healthcheck:\n      test: [\"CMD\", \"redis-cli\"",
                                                       "    healthchek:\n      test: [\"CMD\", \"redis-cli\"", 1))
    done = _config(compose, broken, **CREDENTIALS)
    assert done.returncode != 0 and "healthchek" in done.stderr
    retyped = tmp_path / "retyped.yml"
    retyped.write_text(COMPOSE_FILE.read_text().replace("retries: 10", "retries: [10]", 1))
    done = _config(compose, retyped, **CREDENTIALS)
    assert done.returncode != 0 and "retries" in done.stderr


def test_credentials_are_required_from_the_environment(compose: list[str], config: dict):
    for missing in CREDENTIALS:
        done = _config(compose, **{k: v for k, v in CREDENTIALS.items() if k != missing})
        assert done.returncode != 0 and f"set {missing}" in done.stderr, (missing, done.stderr)
    assert config["services"]["api"]["environment"]["AGENTQ_API_TOKENS"] == CREDENTIALS["AGENTQ_API_TOKENS"]
    flower = config["services"]["flower"]["command"]
    assert flower[:4] == ["celery", "-A", "agentq.celery", "flower"]
    assert f"--basic-auth=admin:{CREDENTIALS['FLOWER_PASSWORD']}" in flower


def test_every_service_has_a_healthcheck_and_waits_for_healthy_dependencies(config: dict):
    services = config["services"]
    for name, service in services.items():
        check = service.get("healthcheck")
        assert check and not check.get("disable") and check["test"][0] in ("CMD", "CMD-SHELL"), name
        assert seconds(check["timeout"]) < seconds(check["interval"]), name
    for name in AGENTQ_SERVICES:
        depends = services[name]["depends_on"]
        assert "redis" in depends, name
        assert {dep["condition"] for dep in depends.values()} == {"service_healthy"}, name
    assert services["worker"]["healthcheck"]["test"] == ["CMD", "agentq", "healthcheck", "--role", "worker"]
    assert services["dispatcher"]["healthcheck"]["test"] == ["CMD", "agentq", "healthcheck", "--role", "dispatcher"]
    assert services["redis"]["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]
    for name, path in (("api", "/v1/health"), ("flower", "/healthcheck")):
        test = services[name]["healthcheck"]["test"]
        assert test[:3] == ["CMD", "python", "-c"] and path in test[3], name
        compile(test[3], f"{name} healthcheck", "exec")


def test_redis_keeps_an_append_only_file_on_a_volume_and_never_evicts(config: dict):
    redis = config["services"]["redis"]
    command = " ".join(redis["command"])
    assert "--appendonly yes" in command and "--maxmemory-policy noeviction" in command
    assert mounts(redis)["/data"] in config["volumes"], "the AOF lives on a named volume"


def test_a_stopped_worker_gets_longer_than_the_default_call_timeout(config: dict):
    default_timeout = Settings().default_timeout_s
    for name in ("worker", "dispatcher"):
        assert seconds(config["services"][name]["stop_grace_period"]) > default_timeout, name


def test_the_worker_service_scales(config: dict):
    worker = config["services"]["worker"]
    for fixed in ("container_name", "hostname", "ports"):
        assert not worker.get(fixed), f"`{fixed}` would stop `--scale worker=N`"
    assert "deploy" not in worker or "replicas" not in worker["deploy"]


def test_published_ports_are_on_loopback_and_only_where_credentials_are_asked(config: dict):
    published = {name: service.get("ports") or [] for name, service in config["services"].items()}
    # Jaeger's UI asks for none: it is published only with `--profile tracing`, and on loopback as every port
    assert {name for name, ports in published.items() if ports} == {"api", "flower", "jaeger"}
    assert config["services"]["jaeger"]["profiles"] == ["tracing"]
    for name, ports in published.items():
        for port in ports:
            host_ip = port.split(":")[0] if isinstance(port, str) else port.get("host_ip")
            assert host_ip == "127.0.0.1", (name, port)


def test_workers_api_and_dispatcher_share_the_metrics_folder(config: dict):
    for name in ("worker", "dispatcher", "api"):
        service = config["services"][name]
        target = service["environment"]["AGENTQ_METRICS_DIR"]
        assert mounts(service)[target] == "metrics", name
    dockerfile = (ROOT / "Dockerfile").read_text()
    # the image runs Flower too, exports traces when asked, and serves MCP servers' tools (agentq worker --mcp)
    assert '"./src[monitoring,otel,mcp]"' in dockerfile
    assert "chown agentq /var/lib/agentq/metrics" in dockerfile  # a new volume takes the folder's owner


def test_the_workers_healthcheck_command_as_written_passes_against_a_live_worker(config: dict, worker_procs,
                                                                                 redis_url: str):
    proc = worker_procs.start(["procA"])
    worker_procs.wait_live(proc, ["procA"])
    command = config["services"]["worker"]["healthcheck"]["test"][1:]
    assert command[0] == "agentq"
    done = cli(redis_url, *command[1:])
    assert done.returncode == 0, done.stderr
    dispatcher = cli(redis_url, *config["services"]["dispatcher"]["healthcheck"]["test"][2:])
    assert dispatcher.returncode == 1 and "no dispatcher of host" in dispatcher.stderr  # none runs here


def test_traces_are_off_unless_asked_and_the_tracing_profile_runs_a_collector_and_jaeger(compose: list[str],
                                                                                         config: dict):
    services = config["services"]
    for name in ("dispatcher", "worker", "api"):
        environment = services[name]["environment"]
        assert environment["OTEL_EXPORTER_OTLP_ENDPOINT"] == "", name  # empty: agentq installs no provider
        assert environment["OTEL_SERVICE_NAME"] == f"agentq-{name}"
        assert not Settings(otel_exporter_otlp_endpoint="").tracing_requested
        assert "profiles" not in services[name]
    for name in TRACING_SERVICES:
        assert services[name]["profiles"] == ["tracing"], name
    assert services["otel-collector"]["depends_on"] == {"jaeger": {"condition": "service_healthy"}}
    collector = yaml.safe_load((ROOT / "config" / "otel-collector.yaml").read_text())
    assert collector["receivers"]["otlp"]["protocols"]["http"]["endpoint"].endswith(":4318")
    assert collector["exporters"]["otlp/jaeger"]["endpoint"] == "jaeger:4317"
    assert collector["service"]["pipelines"]["traces"] == {
        "receivers": ["otlp"], "processors": ["batch"], "exporters": ["otlp/jaeger"]}
    mounted = mounts(services["otel-collector"])["/etc/otelcol-contrib/config.yaml"]
    assert Path(mounted) == ROOT / "config" / "otel-collector.yaml"
    endpoint = "http://otel-collector:4318"
    done = _config(compose, **CREDENTIALS, OTEL_EXPORTER_OTLP_ENDPOINT=endpoint)
    assert done.returncode == 0, done.stderr
    for name in ("dispatcher", "worker", "api"):
        assert yaml.safe_load(done.stdout)["services"][name]["environment"]["OTEL_EXPORTER_OTLP_ENDPOINT"] == endpoint
