"""Every agentq metric as one Prometheus text: this process's counters (or every process's files), combined
with the fleet's state read now."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from agentq.metrics.files import file_families, multiprocess
from agentq.metrics.fleet import fleet_families

if TYPE_CHECKING:
    from agentq.runtime.root import Parts


def _sample_order(sample: Any) -> tuple:
    """Buckets of one label set together, by `le`, then `_count` and `_sum` (what parsers expect)."""
    labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "le"))
    if sample.name.endswith("_bucket"):
        return labels, 0, float(sample.labels.get("le", "inf"))
    return labels, 1 if sample.name.endswith("_count") else 2, 0.0


def combined(families: Iterable[Metric]) -> list[Metric]:
    """One family per name, samples with the same name and labels summed (the same counter from this process
    and from the files); `_created` samples are dropped, they mean nothing summed over processes."""
    merged: dict[str, Metric] = {}
    sums: dict[str, dict[tuple, float]] = {}
    for family in families:
        target = merged.get(family.name)
        if target is None:
            target = merged[family.name] = Metric(family.name, family.documentation, family.type)
            sums[family.name] = {}
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            key = (sample.name, tuple(sorted(sample.labels.items())))
            sums[family.name][key] = sums[family.name].get(key, 0.0) + sample.value
    for name, target in merged.items():
        for (sample_name, labels), value in sums[name].items():
            target.add_sample(sample_name, dict(labels), value)
        target.samples.sort(key=_sample_order)
    return list(merged.values())


class _Snapshot(Collector):
    """A collector yielding families computed once (a registry may call `collect` more than once)."""

    def __init__(self, families: list[Metric]):
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families


def collect_families(parts: Parts) -> list[Metric]:
    """Every agentq metric as this process would render it now: `parts.metrics`' own counts (or, in multiprocess
    mode, every process's files, its own included), the files of other processes and the fleet's state."""
    own = [] if multiprocess() else list(parts.metrics.registry.collect())
    return combined([*own, *file_families(parts.settings), *fleet_families(parts)])


def render_metrics(parts: Parts) -> tuple[bytes, str]:
    """The Prometheus text of every agentq metric and its content type, for `parts` (`agentq.runtime.root.Parts`):
    what the API's `/metrics` and `agentq metrics` serve."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot(collect_families(parts)))
    return generate_latest(registry), CONTENT_TYPE_LATEST
