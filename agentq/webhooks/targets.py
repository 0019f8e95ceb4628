"""Where a webhook may be sent (docs/webhooks.md): `options.webhook` checked at submission, and every address a host
resolves to checked again before each delivery attempt.

The allowlist is the fleet's `webhook_allowlist` (`agentq config`, seeded from `AGENTQ_WEBHOOK_ALLOWLIST`), of
entries in four forms: a host name (`hooks.example.com`), every subdomain of a domain (`*.example.com`), an IP
address (`10.1.2.3`, `::1`) and a network (`10.0.0.0/8`). A webhook's host must match one. Its URL must be https
unless its host is listed by name or address (not through `*.` or a network). An address that is not public
(loopback, private, link-local, shared, reserved, multicast, unspecified) is only reached when the address itself,
or a network containing it, is listed: a listed name that resolves to such an address is refused at delivery, so DNS
cannot point a listed name at an internal service.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from agentq.errors import Problem

EVENTS = ("job.finished", "call.finished", "call.awaiting_approval")
DEFAULT_EVENTS = ("job.finished",)
MAX_URL_LENGTH = 2048
_FIELDS = ("url", "events")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class Allowlist:
    """The webhook allowlist, parsed (see the module's docstring for its forms)."""

    names: frozenset[str] = frozenset()
    domains: tuple[str, ...] = ()  # from `*.example.com`: ".example.com"
    addresses: frozenset[IPAddress] = frozenset()
    networks: tuple[IPNetwork, ...] = ()

    @classmethod
    def parse(cls, entries: Iterable[str]) -> Allowlist:
        names, domains, addresses, networks = set(), [], set(), []
        for raw in entries:
            entry = raw.strip().lower().strip("[]")
            if entry.startswith("*."):
                domains.append(entry[1:])
            elif (address := _address(entry)) is not None:
                addresses.add(address)
            elif "/" in entry:
                try:
                    networks.append(ipaddress.ip_network(entry, strict=False))
                except ValueError:
                    continue  # not a network: it can match nothing
            elif entry:
                names.add(entry.rstrip("."))
        return cls(frozenset(names), tuple(domains), frozenset(addresses), tuple(networks))

    def __bool__(self) -> bool:
        return bool(self.names or self.domains or self.addresses or self.networks)

    def lists_host(self, host: str) -> bool:
        """Whether `host` (a name or an address) matches an entry."""
        address = _address(host)
        if address is not None:
            return self.lists_address(address)
        return host in self.names or any(host.endswith(domain) for domain in self.domains)

    def names_explicitly(self, host: str) -> bool:
        """Whether `host` is listed by its own name or address (plain http is allowed to it)."""
        address = _address(host)
        return address in self.addresses if address is not None else host in self.names

    def lists_address(self, address: IPAddress) -> bool:
        return address in self.addresses or any(address in network for network in self.networks)

    def reaches(self, address: IPAddress) -> bool:
        """Whether a delivery may connect to `address`: a public one, or one the allowlist names."""
        return address.is_global or self.lists_address(address)


class LiveAllowlist(Allowlist):
    """The allowlist `current()` gives at each check: the fleet's (`agentq config`), which changes while the
    process runs."""

    def __init__(self, current: Callable[[], Allowlist]):
        super().__init__()
        object.__setattr__(self, "current", current)

    current: Callable[[], Allowlist]

    def __bool__(self) -> bool:
        return bool(self.current())

    def lists_host(self, host: str) -> bool:
        return self.current().lists_host(host)

    def names_explicitly(self, host: str) -> bool:
        return self.current().names_explicitly(host)

    def lists_address(self, address: IPAddress) -> bool:
        return self.current().lists_address(address)

    def reaches(self, address: IPAddress) -> bool:
        return self.current().reaches(address)


def allowlist_problems(value: Any) -> list[Problem]:
    """Every problem of an allowlist's JSON (an array of entries in the module docstring's forms), each with its
    JSON pointer ([] when it is valid)."""
    if not isinstance(value, list):
        return [Problem("", 'expected an array of hosts, e.g. ["hooks.example.com", "*.example.org", "10.0.0.0/8"]')]
    problems = []
    for index, entry in enumerate(value):
        if not isinstance(entry, str) or not entry.strip():
            problems.append(Problem(f"/{index}", f"expected a host name, *.domain, address or network, got "
                                                 f"{entry!r}"))
        elif "/" in entry and _address(entry.strip().lower().strip("[]")) is None:
            try:
                ipaddress.ip_network(entry.strip(), strict=False)
            except ValueError as error:
                problems.append(Problem(f"/{index}", f"not a network: {error}"))
    return problems


def webhook_problems(value: Any, pointer: str, allowlist: Allowlist) -> list[Problem]:
    """Every problem of an `options.webhook` value, each with its JSON pointer ([] when it is valid)."""
    if not isinstance(value, dict):
        return [Problem(pointer, 'expected an object {"url": ..., "events": [...]}')]
    problems = [Problem(f"{pointer}/{_escape(key)}", f"unknown field; a webhook has {', '.join(_FIELDS)}")
                for key in value if key not in _FIELDS]
    if "url" not in value:
        problems.append(Problem(pointer, "url is required"))
    else:
        problems += url_problems(value["url"], f"{pointer}/url", allowlist)
    if "events" in value:
        problems += _events_problems(value["events"], f"{pointer}/events")
    return problems


def url_problems(url: Any, pointer: str, allowlist: Allowlist) -> list[Problem]:
    """What keeps `url` from being a webhook's target under `allowlist`."""
    if not isinstance(url, str) or not url:
        return [Problem(pointer, "expected an http(s) URL")]
    if len(url) > MAX_URL_LENGTH:
        return [Problem(pointer, f"the URL is longer than {MAX_URL_LENGTH} characters")]
    try:
        parts = urlsplit(url)
        host, _port = parts.hostname, parts.port
    except ValueError as error:
        return [Problem(pointer, f"not a valid URL ({error})")]
    if parts.scheme not in ("http", "https") or not host:
        return [Problem(pointer, "expected an http(s) URL with a host")]
    if parts.username is not None or parts.password is not None:
        return [Problem(pointer, "the URL may not carry credentials (deliveries are signed instead)")]
    return _host_problems(host.rstrip("."), parts.scheme, pointer, allowlist)


def _host_problems(host: str, scheme: str, pointer: str, allowlist: Allowlist) -> list[Problem]:
    if not allowlist:
        return [Problem(pointer, f"host {host!r} is not allowed: the webhook allowlist is empty, so no "
                                 "webhook may be sent (agentq config set webhook_allowlist FILE)")]
    if not allowlist.lists_host(host):
        return [Problem(pointer, f"host {host!r} is not in the webhook allowlist (agentq config webhook_allowlist)")]
    address = _address(host)
    if _is_local_name(host) or (address is not None and not allowlist.reaches(address)):
        return [Problem(pointer, f"host {host!r} is a loopback, private or link-local address; only an address "
                                 "listed in the webhook allowlist itself may be")]
    if scheme != "https" and not allowlist.names_explicitly(host):
        return [Problem(pointer, f"the URL must be https (plain http only to a host the webhook allowlist names "
                                 f"by itself, not through a domain or network: {host!r} is not)")]
    return []


def _events_problems(events: Any, pointer: str) -> list[Problem]:
    if not isinstance(events, list) or not events:
        return [Problem(pointer, f"expected a non-empty array of event names ({', '.join(EVENTS)})")]
    problems = [Problem(f"{pointer}/{i}", f"unknown event {event!r}; events are {', '.join(EVENTS)}")
                for i, event in enumerate(events) if event not in EVENTS]
    if len(set(map(str, events))) != len(events):
        problems.append(Problem(pointer, "an event is named twice"))
    return problems


def webhook_of(options: Any) -> tuple[str, tuple[str, ...]] | None:
    """The URL and events of a stored job's `options.webhook` (None: the job has none)."""
    webhook = options.get("webhook") if isinstance(options, dict) else None
    if not isinstance(webhook, dict) or not isinstance(webhook.get("url"), str):
        return None
    events = webhook.get("events") or DEFAULT_EVENTS
    return webhook["url"], tuple(e for e in events if e in EVENTS)


def resolve_checked(host: str, port: int, allowlist: Allowlist) -> list[IPAddress]:
    """The addresses `host` resolves to, every one checked (`Allowlist.reaches`): raises `TargetRefused` naming
    the first one that may not be reached, or when the name does not resolve."""
    literal = _address(host)
    if literal is not None:
        found = [literal]
    else:
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as error:
            raise TargetRefused(f"cannot resolve {host!r}: {error}") from None
        found = list(dict.fromkeys(ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos))
    for address in found:
        if not allowlist.reaches(address):
            raise TargetRefused(f"{host!r} resolves to {address}, a loopback, private or link-local address that "
                                "the webhook allowlist does not list")
    return found


class TargetRefused(Exception):
    """A delivery's target may not be reached now (a delivery attempt's failure, never a job's)."""


def _address(text: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return None


def _is_local_name(host: str) -> bool:
    return host == "localhost" or host.endswith(".localhost")


def _escape(key: Any) -> str:
    return str(key).replace("~", "~0").replace("/", "~1")
