"""The `agentq` command with the scale-out settings (a Redis Cluster store, Sentinel URLs): what a user sees."""

from __future__ import annotations

import json

from tests.e2e.test_cli import agentq
from tests.integration.cluster import LocalCluster


def test_embedded_mode_ignores_a_cluster_setting_meant_for_a_fleet():
    """`agentq demo` with no AGENTQ_REDIS_URL runs on its private Redis even when AGENTQ_REDIS_CLUSTER is set."""
    result = agentq("demo", "--json", env={"AGENTQ_REDIS_CLUSTER": "true"})
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["status"] == "succeeded"


def test_a_cluster_store_without_a_broker_is_one_line(local_cluster: LocalCluster, redis_url: str):
    env = {"AGENTQ_REDIS_URL": local_cluster.url, "AGENTQ_REDIS_CLUSTER": "true"}
    result = agentq("status", "some-job", env=env, timeout=60)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith("agentq: error: the state store is a Redis Cluster")
    assert "AGENTQ_BROKER_URL" in result.stderr and len(result.stderr.strip().splitlines()) == 1

    local_cluster.flush()
    fine = agentq("status", "some-job", env={**env, "AGENTQ_BROKER_URL": redis_url}, timeout=60)
    assert fine.returncode == 1 and "no job 'some-job'" in fine.stderr  # it reached the cluster and looked


def test_a_bad_sentinel_url_is_one_line():
    result = agentq("status", "some-job", env={"AGENTQ_REDIS_URL": "redis+sentinel://:hunter2@h1:x/"}, timeout=60)
    assert result.returncode == 1
    assert result.stderr.startswith("agentq: error: invalid Sentinel URL")
    assert "'h1:x' is not host:port" in result.stderr and "names no master" in result.stderr
    assert "hunter2" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
