"""Rollouts on a Redis Cluster store (docs/rollouts.md): the rules and the figures share the `{rollouts}` hash tag, so
their pipelines stay in one slot; a versioned activity's calls run on its own queue."""

from __future__ import annotations

from collections import Counter

from tests.integration.cluster import LocalCluster
from tests.integration.conftest import Harness, store_of
from tests.integration.test_plan_jobs import start_worker
from tests.integration.test_rollouts import counted


def test_a_rollout_on_a_cluster(cluster_harness: Harness, local_cluster: LocalCluster):
    h = cluster_harness
    h.tool("sendEmail", params={"to": {"type": "string"}}, output={"type": "object"}, required=["to"])
    h.activities.register("sendEmail", lambda call: {"version": "1"})
    h.activities.register("sendEmail", lambda call: {"version": "2"}, version="2")
    start_worker(h, concurrency=4)
    client = h.client()
    client.rollouts.set("sendEmail", {"routes": [{"to": "sendEmail@2", "share": 0.5}]})
    handle = client.submit({"calls": [{"_tool": "sendEmail", "to": f"u{i}", "_outputPath": f"†state.r{i}"}
                                      for i in range(40)]})
    record = handle.result(timeout=60)
    assert record["status"] == "succeeded", record["error"]
    records = store_of(client).call_records(handle.id).values()
    for r in records:
        assert record["state"][f"r{r.index}"]["version"] == ("2" if r.route == "sendEmail@2" else "1")
    routes = Counter(r.route for r in records)
    assert set(routes) == {"sendEmail@2", "*"}, routes
    rows = {row["route"]: row["calls"] for row in counted(client, {"sendEmail": 40})["sendEmail"]["routes"]}
    assert rows == dict(routes)
