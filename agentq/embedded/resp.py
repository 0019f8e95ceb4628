"""A minimal RESP client over a raw socket: enough for AUTH, PING, INFO and SHUTDOWN (no redis client needed)."""

from __future__ import annotations

import contextlib
import socket

from agentq.embedded.process import HOST


def encode(*parts: str) -> bytes:
    """One command as a RESP array of bulk strings."""
    out = [f"*{len(parts)}\r\n".encode()]
    for part in parts:
        data = part.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


class Reply:
    """Reads simple, error, integer and bulk-string replies from a socket (what the commands above return)."""

    def __init__(self, sock: socket.socket):
        self._file = sock.makefile("rb")

    def read(self) -> str | None:
        line = self._file.readline()
        if not line.endswith(b"\r\n"):
            raise ConnectionError("connection closed before a full reply")
        kind, body = line[:1], line[1:-2].decode(errors="replace")
        if kind in (b"+", b":"):
            return body
        if kind == b"-":
            raise ConnectionError(f"redis error: {body}")
        if kind == b"$":
            return self._bulk(int(body))
        raise ConnectionError(f"unexpected reply {line[:40]!r}")

    def _bulk(self, length: int) -> str | None:
        if length < 0:
            return None
        data = self._file.read(length + 2)
        if len(data) != length + 2:
            raise ConnectionError("connection closed inside a bulk reply")
        return data[:-2].decode(errors="replace")

    def close(self) -> None:
        self._file.close()


def command(port: int, *parts: str, password: str | None = None, timeout: float = 1.0) -> str | None:
    """One command's reply from the server on `HOST:port`; with `password`, sent after an AUTH on the same
    connection."""
    with socket.create_connection((HOST, port), timeout=timeout) as sock:
        sock.sendall((encode("AUTH", password) if password is not None else b"") + encode(*parts))
        reply = Reply(sock)
        try:
            if password is not None:
                reply.read()
            return reply.read()
        finally:
            reply.close()


def server_pid(port: int, password: str | None = None) -> int | None:
    """`process_id` from INFO server, or None if the server does not answer properly."""
    try:
        if command(port, "PING", password=password) != "PONG":
            return None
        info = command(port, "INFO", "server", password=password) or ""
    except (OSError, ValueError):
        return None
    for line in info.splitlines():
        if line.startswith("process_id:"):
            with contextlib.suppress(ValueError):
                return int(line.split(":", 1)[1])
    return None
