"""The batch lane (docs/batch.md): the model requests of a job with `options.priority: "batch"` go through
the Message Batches API at the batch price, and nothing waits for them.

**A request** (a tick's, a latent call's, a module tick's) passes the job's budget gate, is queued in Redis under its
`custom_id` (derived from its place: `<job>/tick/<n>`, `<job>/<call>`), and its tick or call task ends at once with
a deferral (`ModelDeferred`): no engine thread, no slot waits for the batch. When the task comes back (woken by the
round that stored its result, or by its fallback countdown) it finds the result, prices it at the batch price, and
goes on exactly as after a streamed answer, minus streaming dispatch: every call of the solution is written when the
answer is. An expired, canceled or transiently errored result is queued again, up to `AGENTQ_LLM_MAX_ATTEMPTS` sends.

**The round** (`BatchRound`, run every `AGENTQ_BATCH_POLL_S` by one dispatcher of the fleet at a time, holding the
lane's lock): it sends the queued requests as one batch once `AGENTQ_BATCH_MAX_REQUESTS` of them wait (or
`AGENTQ_BATCH_MAX_BYTES` of bodies) or the oldest waited `AGENTQ_BATCH_MAX_AGE_S`, requests of every job together;
it polls the open batches, and when one ended it keeps each result under its request and wakes the task waiting
for it. Everything lives in Redis (`store/batches.py`): a dispatcher that restarts, or another one, goes on where
the last round stopped.

**Under a replay** (`AGENTQ_LLM=replay:<file>`) there is no Message Batches API: `ReplayLane` answers each batched
request from the file at once, as a batch would have answered it: priced at the batch price, counted as a batched
request (`usage.batch`), its calls written when the whole answer is there (no streaming dispatch). No batch is sent
and no round runs.

**Cancel.** A canceled job's requests still queued are dropped at the next flush; one already sent cannot be taken
out of its batch (the API cancels whole batches only): its result is ignored when it arrives, and a batch whose
requests all belong to jobs that ended is canceled.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from agentq.engine.hooks import Hook, ModelRequest, RequestEnded
from agentq.engine.progress import Dispatch
from agentq.errors import LLMError, LLMRetryableError, ModelDeferred
from agentq.llm.base import LLM, LLMAnswer, LLMRequest, OnCall
from agentq.llm.batch import MAX_BATCH_BYTES, BatchClient, answer_of, batch_params, custom_id
from agentq.llm.prices import PriceTable
from agentq.protocol.records import JobInfo
from agentq.store.contracts import BatchStore, CallStore
from agentq.store.views import QueuedRequest

log = logging.getLogger("agentq.batch")

ENTRY_OVERHEAD_BYTES = 100  # a batch entry's own JSON around its params


Counted = Callable[[str, LLMAnswer | None, BaseException | None], None]
"""`counted(model, answer, error)`: a result taken, counted into the metrics as a streamed request is."""

Record = Callable[[LLMRequest, LLMAnswer], None]
"""`record(request, answer)`: an answer taken, appended to `AGENTQ_LLM_RECORD`'s file (`llm/replay.py`)."""


class BatchLane:
    """A batch-lane job's requests: queued for a batch, their results picked up (one per process)."""

    def __init__(self, queue: BatchStore, prices: PriceTable, *, max_attempts: int, recheck_s: float,
                 counted: Counted | None = None, record: Record | None = None):
        self.record = record  # `AGENTQ_LLM_RECORD`: each answer taken is recorded, as a streamed one is
        self.queue = queue
        self.prices = prices
        self.max_attempts = max_attempts
        self.recheck_s = recheck_s  # the waiting task's fallback countdown (the round wakes it before)
        self.counted = counted  # the process's metrics, told of each result taken (as a streamed request's)

    def solve(self, hooks: Hook, job: JobInfo, request: LLMRequest, *, place: str,
              on_send: Callable[[], None] | None = None, on_call: OnCall | None = None) -> LLMAnswer:
        """The answer of `request` once its batch answered it; until then raises `ModelDeferred` (queued, or still
        in its batch). Raises what the budget gate raised, or the `LLMError` of a result that cannot be used."""
        cid = custom_id(place)
        asked = ModelRequest(job=job, request=request, key=f"batch:{cid}", place=place, batch=True)
        held = self.queue.request(cid)
        if "result" in held:
            return _reported(self._answered(hooks, asked, cid, held), on_call)
        if not held:
            sent = hooks.before_request(asked)  # the budget (the fleet's rate limits do not hold batches)
            self.queue.enqueue(cid, place=place, job=job.id, params=_body(sent), tries=0)
            if on_send is not None:
                on_send()
        raise ModelDeferred(f"the request waits for its batch (custom_id {cid})", retry_after_s=self.recheck_s)

    def holds(self, place: str) -> bool:
        """Whether the request of `place` is queued, in a batch, or answered and not taken yet."""
        return bool(self.queue.request(custom_id(place)))

    def _answered(self, hooks: Hook, asked: ModelRequest, cid: str, held: dict[str, str]) -> LLMAnswer:
        answer: LLMAnswer | None = None
        error: BaseException | None = None
        try:
            answer = self._taken(hooks, asked, cid, held)
            return answer
        except LLMError as failed:
            error = failed
            raise
        finally:
            if self.counted is not None:
                self.counted(asked.request.model, answer, error)

    def _taken(self, hooks: Hook, asked: ModelRequest, cid: str, held: dict[str, str]) -> LLMAnswer:
        tries = int(held.get("tries") or 1)
        try:
            answer = answer_of(json.loads(held["result"]))
        except LLMRetryableError as error:
            self.queue.forget(cid)
            if tries < self.max_attempts:
                log.warning("batch request %s (%s): %s; queued again (send %d of %d)", cid, asked.place, error,
                            tries + 1, self.max_attempts)
                self.queue.enqueue(cid, place=asked.place, job=asked.job.id, params=held["params"], tries=tries)
                raise ModelDeferred(str(error), retry_after_s=self.recheck_s) from None
            failed = LLMError(f"{error} (after {tries} batches)")
            hooks.after_request(RequestEnded(asked, None, failed))
            raise failed from None
        except LLMError as error:
            self.queue.forget(cid)
            hooks.after_request(RequestEnded(asked, None, error))
            raise
        cost = self.prices.cost_nanousd(asked.request, answer.usage, batch=True)
        answer = replace(answer, usage=replace(answer.usage, cost_nanousd=cost, batch_requests=1))
        self.queue.forget(cid)
        hooks.after_request(RequestEnded(asked, answer))
        if self.record is not None:
            self.record(asked.request, answer)
        return answer


class ReplayLane:
    """The batch lane under a replay provider: each request answered from the replay at once, as a batch answer
    (the batch price, `batch_requests`, no streaming dispatch); see the module docstring."""

    def __init__(self, replay: LLM, prices: PriceTable, *, counted: Counted | None = None,
                 record: Record | None = None):
        self.record = record
        self.replay = replay  # the bare replay (not priced: the lane prices at the batch price)
        self.prices = prices
        self.counted = counted

    def holds(self, place: str) -> bool:
        """A replay answers at once: nothing waits for a batch."""
        return False

    def solve(self, hooks: Hook, job: JobInfo, request: LLMRequest, *, place: str,
              on_send: Callable[[], None] | None = None, on_call: OnCall | None = None) -> LLMAnswer:
        asked = ModelRequest(job=job, request=request, key=f"batch:{custom_id(place)}", place=place, batch=True)
        sent = replace(asked, request=hooks.before_request(asked))
        answer: LLMAnswer | None = None
        error: BaseException | None = None
        try:
            if on_send is not None:
                on_send()
            replayed = self.replay.solve(sent.request)  # no on_call: a batch answer comes whole
            cost = self.prices.cost_nanousd(sent.request, replayed.usage, batch=True)
            answer = replace(replayed, usage=replace(replayed.usage, cost_nanousd=cost, batch_requests=1))
            if self.record is not None:
                self.record(sent.request, answer)
        except BaseException as failed:
            error = failed
            raise
        finally:
            hooks.after_request(RequestEnded(sent, answer, error))
            if self.counted is not None:
                self.counted(request.model, answer, error)
        return _reported(answer, on_call)


Lane = BatchLane | ReplayLane
"""What takes a batch job's model requests: the Message Batches API's lane, or a replay's."""


def _reported(answer: LLMAnswer, on_call: OnCall | None) -> LLMAnswer:
    """The answer, its solution's calls handed to `on_call` one by one as a stream would have (all at once here)."""
    if on_call is None or not isinstance(answer.solution, dict):
        return answer
    calls = answer.solution.get("calls")
    for index, call in enumerate(calls if isinstance(calls, list) else ()):
        if isinstance(call, dict):
            on_call(index, call)
    return answer


def _body(request: LLMRequest) -> str:
    return json.dumps(batch_params(request), ensure_ascii=False, separators=(",", ":"))


class TaskWaker:
    """Sends again the task that waits for a request's result (its place names it), so it need not wait for its
    fallback countdown: a tick's task (`<job>/tick/<n>`), or a latent or module call's (`<job>/<call>[/again]`). A
    task that runs twice finds its work done or claimed: the engine's steps are idempotent."""

    def __init__(self, store: CallStore, dispatch: Dispatch):
        self.store = store
        self.dispatch = dispatch

    def __call__(self, place: str) -> None:
        parts = place.split("/")
        if len(parts) == 3 and parts[1] == "tick" and parts[2].isdigit():
            self.dispatch.tick(parts[0], int(parts[2]))
            return
        if len(parts) >= 2:
            records = self.store.call_records(parts[0], [parts[1]])
            if parts[1] in records:
                self.dispatch(parts[0], [records[parts[1]]])


class BatchRound:
    """One round of the lane: send the queued requests that are due as batches, poll the open ones."""

    def __init__(self, queue: BatchStore, client: BatchClient, wake: Callable[[str], None], *, max_requests: int,
                 max_bytes: int = MAX_BATCH_BYTES, max_age_s: float, clock: Callable[[], float] = time.time):
        self.queue = queue
        self.client = client
        self.wake = wake
        self.max_requests = max_requests
        self.max_bytes = max_bytes
        self.max_age_s = max_age_s
        self.clock = clock
        self.batches_sent = 0

    def run(self) -> None:
        self.flush()
        self.poll()

    # ------------------------------------------------------------------------------------ sending

    def flush(self) -> None:
        """Send what is due: full batches while the queue holds one, then the rest once its oldest is old enough."""
        while True:
            waiting = self.queue.waiting(self.max_requests)
            if not waiting:
                return
            full = len(waiting) >= self.max_requests
            if not full and self.clock() * 1000 - waiting[0][1] < self.max_age_s * 1000:
                return
            if not self._send([cid for cid, _ in waiting]) or not full:
                return

    def _send(self, ids: list[str]) -> bool:
        """Send the queued requests of `ids` (those of ended jobs are dropped) as one batch, within the size
        limit; False when nothing could be sent now."""
        requests = self.queue.queued(ids)
        active = self.queue.active_jobs(r.job for r in requests)
        self.queue.drop(r.custom_id for r in requests if r.job not in active)
        entries = self._entries([r for r in requests if r.job in active])
        if not entries:
            return bool(requests)
        return self._create(entries)

    def _entries(self, requests: list[QueuedRequest]) -> list[dict[str, Any]]:
        """The batch entries of the oldest `requests` that fit in `max_bytes` (at least one)."""
        entries: list[dict[str, Any]] = []
        size = 0
        for queued in requests:
            size += len(queued.params.encode()) + ENTRY_OVERHEAD_BYTES
            if entries and size > self.max_bytes:
                break
            entries.append({"custom_id": queued.custom_id, "params": json.loads(queued.params)})
        return entries

    def _create(self, entries: list[dict[str, Any]]) -> bool:
        try:
            batch_id = self.client.create(entries)
        except LLMRetryableError as error:
            log.warning("a batch of %d requests could not be sent (%s); the next round tries again", len(entries),
                        error)
            return False
        except LLMError as error:  # refused as a whole: its requests fail rather than wait forever
            log.error("a batch of %d requests was refused: %s", len(entries), error)
            self._fail([e["custom_id"] for e in entries], str(error))
            return True
        self.queue.sent(batch_id, [e["custom_id"] for e in entries])
        self.batches_sent += 1
        log.info("batch %s sent: %d requests", batch_id, len(entries))
        return True

    def _fail(self, ids: list[str], message: str) -> None:
        result = json.dumps({"type": "errored", "error": {"type": "error", "error": {
            "type": "invalid_request_error", "message": message}}})
        self.queue.sent(f"refused-{uuid.uuid4().hex[:12]}", ids)
        for cid in ids:
            self._keep(cid, result)

    # ------------------------------------------------------------------------------------ polling

    def poll(self) -> None:
        for batch_id in self.queue.open_batches():
            try:
                self._poll(batch_id)
            except LLMError as error:
                log.warning("batch %s could not be polled (%s); the next round tries again", batch_id, error)

    def _poll(self, batch_id: str) -> None:
        if batch_id.startswith("refused-"):
            self.queue.close(batch_id)
            return
        state = self.client.retrieve(batch_id)
        if not state.ended:
            if state.status == "in_progress":
                self._cancel_if_abandoned(batch_id)
            return
        members = self.queue.members(batch_id)
        jobs = self.queue.jobs_of(members)
        active = self.queue.active_jobs(job for job in jobs.values() if job is not None)
        for cid, result in self.client.results(batch_id):
            if jobs.get(cid) in active:
                self._keep(cid, json.dumps(result))
            elif jobs.get(cid) is not None:
                self.queue.forget(cid)  # its job ended (canceled): the result is not wanted
        self.queue.close(batch_id)
        log.info("batch %s ended: %s", batch_id, state.counts)

    def _keep(self, cid: str, result: str) -> None:
        """Keep a request's result and wake the task waiting for it."""
        place = self.queue.request(cid).get("place")
        if self.queue.store_result(cid, result) and place:
            try:
                self.wake(place)
            except Exception:  # its fallback countdown brings it back
                log.warning("could not wake the task of %s", place, exc_info=True)

    def _cancel_if_abandoned(self, batch_id: str) -> None:
        """Cancel a batch every request of which belongs to a job that ended (the API cancels whole batches)."""
        jobs = self.queue.jobs_of(self.queue.members(batch_id))
        if not jobs or self.queue.active_jobs(job for job in jobs.values() if job is not None):
            return
        log.info("batch %s: every request's job ended; the batch is canceled", batch_id)
        self.client.cancel(batch_id)


class BatchPoller:
    """Runs the lane's round every `interval_s` in a daemon thread of a dispatcher, while this process holds the
    lane's lock (one dispatcher of the fleet at a time; another takes over when it stops renewing it)."""

    def __init__(self, queue: BatchStore, make_round: Callable[[], BatchRound], *, interval_s: float):
        self.queue = queue
        self.make_round = make_round
        self.interval_s = interval_s
        self.token = uuid.uuid4().hex
        self._round: BatchRound | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> BatchPoller:
        self._thread = threading.Thread(target=self._run, name="agentq-batch-lane", daemon=True)
        self._thread.start()
        return self

    def run_once(self) -> bool:
        """One round if this process holds (or takes) the lane's lock; whether it ran."""
        if not self.queue.lock(self.token, int(max(self.interval_s * 3, 5.0) * 1000)):
            return False
        if self._round is None:
            self._round = self.make_round()
        self._round.run()
        return True

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.run_once()
            except Exception:
                log.warning("the batch lane's round failed; the next one tries again", exc_info=True)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


__all__ = ["BatchLane", "BatchPoller", "BatchRound", "Lane", "ReplayLane", "TaskWaker"]
