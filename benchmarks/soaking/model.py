"""The fake Messages API's side of the soak: how it answers the soak's agent jobs, its outage windows (429, 529,
500, as the real API answers them), and its request log, a record outside the store.

A stream cut (`fail_for(CUT, …)`) starts its answer and ends it with an `overloaded_error` event, as the real API
does mid-stream. An agent job's context names its tag (`soak job <tag>`; a module's child job names its parent's,
in its input); each request is logged with that tag, whether it was a tick or a latent call, and the status it
got. A first tick asks for one `soakStep` (tagged by the request, so a tick asked again starts a step of another
tag) and one latent `soakDraft`; a later tick gives the output. A batch-lane request is never cut (a batch's result
is whole): during a cut outage it gets an `overloaded_error` result instead.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass

from tests.fake_anthropic import BATCHES_PATH, Answer, FakeAnthropic, RecordedRequest

TAG = re.compile(r"soak job (\S+?)[.\"\\ ]")
# a latent call's request names the step's output it is about
STEP_TAG = re.compile(r"([a-z]+-(?:agent|batch|module)\d+)-m\d+")
OUTAGE_ANSWERS = {429: {"retry-after": "1"}, 529: {}, 500: {}}
CUT = 0  # the outage "status" of a stream cut: it starts, then an `overloaded_error` event ends it


@dataclass(frozen=True)
class ModelRequest:
    at: float  # unix time
    tag: str
    latent: bool
    status: int
    thinking: bool = False  # the request asked for thinking


class SoakModel:
    def __init__(self) -> None:
        self.fake = FakeAnthropic()
        self.fake.responder = self.answer
        self.log: list[ModelRequest] = []
        self.lock = threading.Lock()
        self.outage: tuple[int, float] | None = None  # (status, until unix time)
        self.counter = 0

    def start(self) -> SoakModel:
        self.fake.start()
        server = self.fake._server
        assert server is not None
        # a dispatcher killed mid-request (the soak's faults) resets its connection: expected, not worth a traceback
        server.handle_error = lambda request, client_address: None  # type: ignore[method-assign]
        return self

    @property
    def url(self) -> str:
        return self.fake.base_url

    def fail_for(self, status: int, seconds: float) -> None:
        with self.lock:
            self.outage = (status, time.time() + seconds)

    def answer(self, request: RecordedRequest) -> Answer:
        text = json.dumps(request.body)
        found = TAG.search(text) or STEP_TAG.search(text)
        tag = found.group(1) if found else "?"
        with self.lock:
            self.counter += 1
            number = self.counter
            outage = self.outage if self.outage and self.outage[1] > time.time() else None
            status = outage[0] if outage else 200
            thinks = bool((request.body or {}).get("thinking"))
            self.log.append(ModelRequest(time.time(), tag, request.is_latent, status, thinks))
        if outage and status == CUT and request.path.startswith(BATCHES_PATH):  # a batch's result is never cut
            return Answer.http_error(529)
        if outage and status == CUT:
            return Answer.stream_error({"calls": [], "output": None}, after=1, chunk_size=8)
        if outage:
            return Answer.http_error(status, headers=OUTAGE_ANSWERS[status])
        if request.is_latent:
            return Answer.solution({"output": f"a note on {tag}"}, delay_s=0.01)
        # a thinking job's answers start with a signed thinking block, which its later requests carry back
        thinking = [f"weighing {tag}, request {number}"] if thinks else []
        messages = (request.body or {}).get("messages") or []
        if any(m.get("role") == "assistant" for m in messages):
            return Answer.solution({"calls": [], "output": {"answer": f"done {tag}"}}, delay_s=0.01,
                                   thinking=thinking)
        step = {"_tool": "soakStep", "tag": f"{tag}-m{number}", "seconds": 0.2, "_outputPath": "†state.step",
                "_reasoningForCall": "the step first"}
        draft = {"_tool": "soakDraft", "about": "†state.step", "_outputPath": "†state.note"}
        return Answer.solution({"calls": [step, draft], "output": None}, chunk_size=24, delay_s=0.01,
                               thinking=thinking)

    def refusals(self) -> list[str]:
        """The requests the fake refused as the real API would (a thinking block not carried back unchanged, a
        malformed request): the tag of each and why."""
        found = [(TAG.search(json.dumps(r.body)) or STEP_TAG.search(json.dumps(r.body)), why)
                 for r, why in list(self.fake.refusals)]
        return [f"{m.group(1) if m else '?'}: {why}" for m, why in found]

    def snapshot(self) -> list[ModelRequest]:
        with self.lock:
            return list(self.log)

    def stop(self) -> None:
        self.fake.stop()
