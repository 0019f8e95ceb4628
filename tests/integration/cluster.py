"""Private Redis topologies on loopback for tests: a three-master Redis Cluster and a Sentinel group.

Both are built from `agentq.embedded.RedisServer` (free ports, files in temporary folders, never
6379) and stopped by `stop()`; the fixtures in `tests/integration/conftest.py` start each one once per session
and clean it between tests (`flush()`), so a module of tests pays the start-up once.

    with LocalCluster() as cluster:         # three masters, slots split evenly, cluster_state:ok everywhere
        settings = Settings(redis_url=cluster.url, redis_cluster=True, broker_url=plain_redis_url)

    with SentinelGroup() as group:          # a master, a replica of it and one sentinel watching them
        settings = Settings(redis_url=group.url)    # redis+sentinel://127.0.0.1:<port>/agentqmaster/0
        group.failover()                            # promote the replica (SENTINEL FAILOVER), wait until seen
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any

import redis

from agentq.embedded import HOST, RedisServer
from agentq.errors import ConfigurationError

SLOTS = 16384
_REPLICATION = ("--repl-diskless-sync-delay", "0")  # a replica syncs at once (the default waits 5 s)
MASTER_NAME = "agentqmaster"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def _wait(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except (redis.RedisError, OSError) as error:
            last_error = error
        time.sleep(0.05)
    raise RuntimeError(f"timed out after {timeout} s waiting for {what}" + (f" ({last_error})" if last_error else ""))


def _client(port: int, **options: Any) -> redis.Redis:
    return redis.Redis(host=HOST, port=port, decode_responses=True, socket_timeout=5, **options)


def _node(bus_port: int) -> RedisServer:
    return RedisServer(extra_args=("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                                   "--cluster-port", str(bus_port), "--cluster-node-timeout", "5000",
                                   "--cluster-require-full-coverage", "yes"))


class LocalCluster:
    """A Redis Cluster of `masters` nodes (no replicas) on loopback, slots split evenly among them."""

    def __init__(self, masters: int = 3):
        # the cluster bus port is named, not the default port + 10000 (which may exceed 65535 for a free port)
        self.bus_ports = [_free_port() for _ in range(masters)]
        self.servers = [_node(bus_port) for bus_port in self.bus_ports]

    @property
    def ports(self) -> list[int]:
        return [server.port for server in self.servers]

    @property
    def url(self) -> str:
        """The URL of the first node (any node will do for a cluster client)."""
        return f"redis://{HOST}:{self.ports[0]}/0"

    def start(self) -> LocalCluster:
        try:
            for index in range(len(self.servers)):
                self._start_node(index)
            self._form()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_node(self, index: int, attempts: int = 5) -> None:
        """Start node `index`, on another bus port when its own was taken meanwhile (the server retries its client
        port on a fresh one, not the bus port it was given)."""
        for attempt in range(attempts):
            try:
                self.servers[index].start()
                return
            except ConfigurationError:
                if attempt == attempts - 1:
                    raise
                self.bus_ports[index] = _free_port()
                self.servers[index] = _node(self.bus_ports[index])

    def _form(self) -> None:
        count = len(self.servers)
        clients = [_client(port) for port in self.ports]
        try:
            for index, client in enumerate(clients):
                first, last = index * SLOTS // count, (index + 1) * SLOTS // count - 1
                client.execute_command("CLUSTER", "ADDSLOTS", *range(first, last + 1))
                client.execute_command("CLUSTER", "SET-CONFIG-EPOCH", index + 1)
            for client in clients[1:]:
                client.execute_command("CLUSTER", "MEET", HOST, self.ports[0], self.bus_ports[0])

            def formed() -> bool:
                for client in clients:
                    info = client.execute_command("CLUSTER", "INFO")
                    info = info if isinstance(info, str) else info.decode()
                    fields = dict(line.split(":", 1) for line in info.split() if ":" in line)
                    if fields.get("cluster_state") != "ok" or int(fields.get("cluster_known_nodes", 0)) != count:
                        return False
                return True

            _wait(formed, 30, f"a {count}-node cluster to agree (cluster_state:ok)")
        finally:
            for client in clients:
                client.close()

    def node_of(self, key: str) -> int:
        """The port of the node that serves `key`'s slot."""
        with _client(self.ports[0]) as client:
            slot = int(client.execute_command("CLUSTER", "KEYSLOT", key))
            for first, last, (_host, port, *_), *_ in client.execute_command("CLUSTER", "SLOTS"):
                if first <= slot <= last:
                    return int(port)
        raise LookupError(f"no node serves {key!r}")

    def keys(self) -> dict[int, list[str]]:
        """Every key of the cluster by the port of the node holding it."""
        found: dict[int, list[str]] = {}
        for port in self.ports:
            with _client(port) as client:
                found[port] = sorted(client.scan_iter(count=1000))
        return found

    def flush(self) -> None:
        for port in self.ports:
            with _client(port) as client:
                client.flushall()

    def stop(self) -> None:
        for server in self.servers:
            server.stop()

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class SentinelGroup:
    """A master, one replica of it and one sentinel watching them (quorum 1), on loopback."""

    def __init__(self, *, down_after_ms: int = 1000):
        self.down_after_ms = down_after_ms
        self.first = RedisServer(extra_args=_REPLICATION)
        self.second: RedisServer | None = None
        self.sentinel: RedisServer | None = None

    @property
    def url(self) -> str:
        """The state store's (and broker's) Sentinel URL for this group, database 0."""
        return self.url_for(0)

    def url_for(self, db: int) -> str:
        assert self.sentinel is not None, "start() the group first"
        return f"redis+sentinel://{HOST}:{self.sentinel.port}/{MASTER_NAME}/{db}"

    @property
    def servers(self) -> list[RedisServer]:
        return [s for s in (self.first, self.second) if s is not None]

    def start(self) -> SentinelGroup:
        try:
            self.first.start()
            second = self.second = RedisServer(extra_args=(*_REPLICATION, "--replicaof", HOST,
                                                           str(self.first.port))).start()
            _wait(lambda: self._replication(second.port).get("master_link_status") == "up", 30,
                  "the replica to sync with its master")
            self.sentinel = RedisServer(
                config=(f"sentinel monitor {MASTER_NAME} {HOST} {self.first.port} 1\n"
                        f"sentinel down-after-milliseconds {MASTER_NAME} {self.down_after_ms}\n"
                        f"sentinel failover-timeout {MASTER_NAME} 10000\n"
                        f"sentinel parallel-syncs {MASTER_NAME} 1\n"),
                extra_args=("--sentinel",)).start()
            _wait(self._replica_promotable, 60, "the sentinel to discover the replica and read its state")
        except BaseException:
            self.stop()
            raise
        return self

    def master_port(self) -> int:
        """The port the sentinel currently names as the master."""
        assert self.sentinel is not None
        with _client(self.sentinel.port) as client:
            _host, port = client.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME)
        return int(port)

    def master(self) -> RedisServer:
        port = self.master_port()
        return next(s for s in self.servers if s.port == port)

    def replica(self) -> RedisServer:
        port = self.master_port()
        return next(s for s in self.servers if s.port != port)

    def failover(self, timeout: float = 30.0) -> int:
        """Promote the replica (`SENTINEL FAILOVER`); returns the new master's port once the sentinel names it,
        the promoted server says it is a master, and the old master replicates it."""
        assert self.sentinel is not None
        old, new = self.master(), self.replica()
        with _client(self.sentinel.port) as client:
            client.execute_command("SENTINEL", "FAILOVER", MASTER_NAME)
        self.await_master(new.port, timeout)
        _wait(lambda: self._replication(old.port).get("role") == "slave", timeout,
              "the old master to become a replica")
        return new.port

    def await_master(self, port: int, timeout: float = 30.0) -> None:
        """Wait until the sentinel names `port` as a healthy master (what clients check before using it: the
        address alone changes a moment before the sentinel's own record of the master does) and that server
        says it is one."""
        def named() -> bool:
            with _client(self._sentinel_port) as client:
                master = _fields(client.execute_command("SENTINEL", "MASTER", MASTER_NAME))
            flags = set(master.get("flags", "").split(","))
            return (int(master.get("port", 0)) == port and "master" in flags and not flags & {"s_down", "o_down"}
                    and self._replication(port).get("role") == "master")

        _wait(named, timeout, f"the sentinel to name {port} the master")

    @property
    def _sentinel_port(self) -> int:
        assert self.sentinel is not None, "start() the group first"
        return self.sentinel.port

    def flush(self) -> None:
        with _client(self.master_port()) as client:
            client.flushall()

    def _replication(self, port: int) -> dict[str, str]:
        with _client(port) as client:
            return {k: str(v) for k, v in client.info("replication").items()}

    def _replica_promotable(self) -> bool:
        """The sentinel knows the replica, is connected to it and has read its state (else a failover now
        would answer NOGOODSLAVE)."""
        assert self.sentinel is not None
        with _client(self.sentinel.port) as client:
            replicas = [_fields(r) for r in client.execute_command("SENTINEL", "REPLICAS", MASTER_NAME)]
        return len(replicas) == 1 and all(
            r.get("flags") == "slave" and r.get("master-link-status") == "ok"
            and 0 <= int(r.get("info-refresh", "-1")) < 5000 for r in replicas)

    def stop(self) -> None:
        for server in (self.sentinel, self.second, self.first):
            if server is not None:
                server.stop()

    def __enter__(self) -> SentinelGroup:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _fields(reply: Any) -> dict[str, str]:
    """A sentinel's flat [name, value, ...] reply (or RESP3 map) as a dict."""
    if isinstance(reply, dict):
        return {str(k): str(v) for k, v in reply.items()}
    return {str(k): str(v) for k, v in zip(reply[::2], reply[1::2], strict=True)}
