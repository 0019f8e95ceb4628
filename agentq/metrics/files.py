"""prometheus_client's multiprocess mode for `agentq worker` / `agentq dispatcher`: the folders each process
writes its counters to, folding the files of dead processes into archives, and reading every file at a scrape.

Setting the mode changes `PROMETHEUS_MULTIPROC_DIR` and prometheus_client's value class for the whole process,
which is why only a worker about to fork its pool calls `enable_multiprocess`; folding writes prometheus_client's
own file format (`MmapedDict`), the one its `MultiProcessCollector` reads.
"""

from __future__ import annotations

import contextlib
import getpass
import hashlib
import logging
import os
import re
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from prometheus_client import values
from prometheus_client.core import Metric
from prometheus_client.mmap_dict import MmapedDict, mmap_key
from prometheus_client.multiprocess import MultiProcessCollector

from agentq.embedded.process import pid_alive
from agentq.settings import Settings

log = logging.getLogger("agentq.metrics")

HEADER_BYTES = 8  # a metrics file's header: the bytes used, then padding (prometheus_client's `MmapedDict`)


def metrics_dir(settings: Settings) -> Path:
    """`AGENTQ_METRICS_DIR`, or `<temp>/agentq-metrics-<uid>-<fleet>`: one folder per host inside. `<fleet>` is
    `fleet_key(settings)`, so two fleets run on one machine (other brokers, other stores) never count into one
    folder, and a scrape shows only its own fleet's counters."""
    if settings.metrics_dir is not None:
        return Path(settings.metrics_dir)
    user = os.getuid() if hasattr(os, "getuid") else getpass.getuser()
    return Path(tempfile.gettempdir()) / f"agentq-metrics-{user}-{fleet_key(settings)}"


def fleet_key(settings: Settings) -> str:
    """A short hash naming the fleet: its broker, its store and its namespace (URLs without their passwords, so
    a changed password keeps the folder)."""
    parts = [_without_password(settings.effective_broker_url), _without_password(settings.redis_url),
             settings.namespace]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:10]


def _without_password(url: str) -> str:
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if parts.password is None:
        return url
    netloc = parts.netloc.rpartition("@")
    user = netloc[0].partition(":")[0]
    return urlunsplit(parts._replace(netloc=f"{user}@{netloc[2]}"))


def host_folder(base: Path, hostname: str | None = None) -> Path:
    """This host's folder under `base` (the hostname, made safe as a file name)."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", hostname or socket.gethostname()) or "host"
    return base / name


def multiprocess() -> bool:
    """True when this process writes its counters to files (prometheus_client's multiprocess mode)."""
    return bool(getattr(values.ValueClass, "_multiprocess", False))


def enable_multiprocess(settings: Settings) -> Path | None:
    """Put this process (a worker about to fork its pool) in multiprocess mode; returns the folder its
    processes write to. Call it before any metric is counted in the process.

    `PROMETHEUS_MULTIPROC_DIR`, when set, is used as it is (managed by the operator). Otherwise it is set to
    this host's folder under `metrics_dir`, after folding the files of processes that are gone into its
    archive files. A folder that cannot be written is a warning, not a worker that does not start: its
    counts then stay in each process's memory, where no scrape reads them (None is returned)."""
    external = settings.prometheus_multiproc_dir
    folder = external if external else host_folder(metrics_dir(settings))
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if not external:
            fold_dead_processes(folder)
        probe = folder / f".probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        log.warning("metrics: cannot write to %s (%s); this worker's counts will not be exported (see "
                    "AGENTQ_METRICS_DIR)", folder, error.strerror or error)
        return None
    # prometheus_client takes its folder from its own variable, in this process and in the pool's forked children
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(folder)
    if not multiprocess():
        values.ValueClass = values.get_value_class()
    return folder


def _pid_of(path: Path) -> int | None:
    """The pid in a metrics file's name (`counter_123.db`), None for an archive."""
    stem = path.name[:-3].rsplit("_", 1)[-1]
    return int(stem) if stem.isdigit() else None


@contextlib.contextmanager
def _folder_lock(base: Path, *, exclusive: bool) -> Iterator[None]:
    """Readers of the metrics folders (shared) against folding (exclusive): a scrape never sees a file both
    in the archive and on its own. No locking where `fcntl` does not exist."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    try:
        handle = open(base / ".lock", "a+b")  # noqa: SIM115  (closed below)
    except OSError:  # a read-only folder: nothing folds into it either
        yield
        return
    try:
        fcntl.flock(handle, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        handle.close()


def fold_dead_processes(folder: Path) -> int:
    """Fold the counter and histogram files of processes that are no longer alive into one archive file per
    kind (`counter_archive.db`, ...), so their counts stay in the totals; gauge files of dead processes are
    removed. Returns how many files were folded or removed."""
    with _folder_lock(folder.parent, exclusive=True):
        dead = [path for path in folder.glob("*.db") if (pid := _pid_of(path)) is not None and not pid_alive(pid)]
        by_kind: dict[str, list[Path]] = {}
        for path in dead:
            kind = path.name.split("_", 1)[0]
            if kind == "gauge" or not _begun(path):  # a gauge dies with its process; a file never begun is empty
                path.unlink(missing_ok=True)
            else:
                by_kind.setdefault(kind, []).append(path)
        for kind, files in by_kind.items():
            _fold_into_archive(folder, kind, files)
    return len(dead)


def _begun(path: Path) -> bool:
    """Whether prometheus_client began the metrics file (its header written): a process killed while it created
    the file leaves it empty, with no count in it, and prometheus_client cannot read it."""
    try:
        return path.stat().st_size >= HEADER_BYTES
    except FileNotFoundError:
        return False


def _fold_into_archive(folder: Path, kind: str, files: list[Path]) -> None:
    """Merge `files` (of dead processes) with `<kind>_archive.db` into a new archive, then remove them."""
    archive = folder / f"{kind}_archive.db"
    sources = [*files, archive] if archive.exists() else files
    merged = MultiProcessCollector.merge([str(p) for p in sources], accumulate=False)
    partial = folder / f".{kind}_archive.partial"
    partial.unlink(missing_ok=True)
    target = MmapedDict(str(partial))
    try:
        for metric in merged:
            for sample in metric.samples:
                key = mmap_key(metric.name, sample.name, list(sample.labels), list(sample.labels.values()),
                               metric.documentation)
                target.write_value(key, sample.value, 0.0)
    finally:
        target.close()
    os.replace(partial, archive)
    for path in files:
        path.unlink(missing_ok=True)


def _counter_folders(base: Path, external: Path | None) -> list[Path]:
    """Every host folder under `base`, and `PROMETHEUS_MULTIPROC_DIR` when it is another folder."""
    folders = [p for p in base.glob("*") if p.is_dir()] if base.is_dir() else []
    if external and external.is_dir() and external.resolve() not in {f.resolve() for f in folders}:
        folders.append(external)
    return folders


def file_families(settings: Settings) -> list[Metric]:
    """The counters every agentq process of every host folder wrote (and `PROMETHEUS_MULTIPROC_DIR`'s)."""
    base = metrics_dir(settings)
    folders = _counter_folders(base, settings.prometheus_multiproc_dir)
    if not folders:
        return []
    lock = _folder_lock(base, exclusive=False) if base.is_dir() else contextlib.nullcontext()
    with lock:
        for _ in range(3):  # a file removed between the glob and its read (by hand): look again
            files = [str(path) for folder in folders for path in folder.glob("*.db") if _begun(path)]
            try:
                return list(MultiProcessCollector.merge(files, accumulate=True))
            except FileNotFoundError:
                continue
    return []
