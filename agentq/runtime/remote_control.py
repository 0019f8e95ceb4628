"""Which Celery remote-control commands a worker obeys (`AGENTQ_REMOTE_CONTROL`).

Celery's remote control is a broadcast on the broker: any process that can reach the broker can send one,
with no credentials beyond the broker's. Left as it is, a plain Celery app pointed at the broker URL stops
every worker (`app.control.broadcast("shutdown")`), shrinks their pools or makes them stop consuming a queue.

- `read` (the default): the inspection commands (Celery's `inspect` type: ping, stats, active, reserved,
  scheduled, registered, active_queues, conf, report, query_task, revoked, clock, ...), which Flower and
  `celery inspect` use; `enable_events` and `heartbeat` (Flower turns task events on in workers started after
  it); and `revoke` without `terminate` (agentq's cancel revokes the tasks of calls not started). Every other
  command (shutdown, pool_grow, pool_shrink, pool_restart, autoscale, add_consumer, cancel_consumer,
  rate_limit, time_limit, terminate, revoke with `terminate`, revoke_by_stamped_headers, disable_events,
  election) is refused: the worker logs a warning and replies with an error; nothing changes.
- `all`: every command, as Celery serves them.

The policy is a consumer bootstep (`RemoteControlPolicy`) that replaces the command table of the worker's
mailbox node (`celery.worker.pidbox`) with a guarded copy; Celery's global registry is left untouched.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from celery import bootsteps

log = logging.getLogger("agentq.remote_control")

READ = "read"
ALL = "all"
READ_CONTROL_COMMANDS = frozenset({"enable_events", "heartbeat", "revoke"})
"""The commands of Celery's `control` type a worker obeys in `read` mode (besides every `inspect` command)."""

Handler = Callable[..., Any]


def allowed_commands(meta: Mapping[str, Any]) -> frozenset[str]:
    """The commands (and their aliases) obeyed in `read` mode, from Celery's registry of command infos."""
    names = set()
    for name, info in meta.items():
        if info.type == "inspect" or name in READ_CONTROL_COMMANDS:
            names.add(name)
            if info.alias:
                names.add(info.alias)
    return frozenset(names)


def guarded_handlers(handlers: Mapping[str, Handler], meta: Mapping[str, Any], mode: str) -> dict[str, Handler]:
    """The command table a worker in `mode` serves: `all` keeps `handlers`; `read` keeps the allowed ones,
    refuses `revoke` with `terminate`, and answers every other command with a refusal."""
    if mode == ALL:
        return dict(handlers)
    allowed = allowed_commands(meta)
    table = {name: handler if name in allowed else _refusal(name) for name, handler in handlers.items()}
    if "revoke" in table:
        table["revoke"] = _without_terminate(handlers["revoke"])
    return table


def refusal_message(command: str) -> str:
    return (f"remote control command {command!r} refused: this worker serves inspection and revoke only "
            "(AGENTQ_REMOTE_CONTROL=read); set AGENTQ_REMOTE_CONTROL=all on the worker to allow it")


def _refusal(command: str) -> Handler:
    def refuse(state: Any, **arguments: Any) -> dict[str, str]:
        log.warning("%s", refusal_message(command))
        return {"error": refusal_message(command)}

    return refuse


def _without_terminate(revoke: Handler) -> Handler:
    """`revoke` that refuses to kill a running task (`terminate=True`); agentq never interrupts an activity."""
    def guarded_revoke(state: Any, **arguments: Any) -> Any:
        if arguments.get("terminate"):
            log.warning("%s", refusal_message("revoke with terminate"))
            return {"error": refusal_message("revoke with terminate")}
        return revoke(state, **arguments)

    return guarded_revoke


class RemoteControlPolicy(bootsteps.Step):
    """Consumer bootstep: the worker's mailbox serves the commands `app.conf.agentq_remote_control` allows
    (`read` unless set to `all`). Does nothing when remote control is off."""

    requires = ("celery.worker.consumer.control:Control",)
    CONTROL_STEP = "celery.worker.consumer.control.Control"

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        from celery.worker.control import Panel

        control = parent.blueprint.steps.get(self.CONTROL_STEP)
        if control is None:  # remote control off (worker_enable_remote_control=False)
            return
        mode = parent.app.conf.get("agentq_remote_control", READ)
        node = control.box.node
        node.handlers = guarded_handlers(node.handlers, Panel.meta, mode)


def install(app: Any, mode: str) -> None:
    """Serve only the remote-control commands `mode` allows on the workers of `app`."""
    app.conf.agentq_remote_control = mode
    app.steps["consumer"].add(RemoteControlPolicy)
