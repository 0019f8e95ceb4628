"""The pure parts of webhooks: the allowlist and URL checks, signatures, ids and the retry schedule."""

from __future__ import annotations

import ipaddress

import pytest

from agentq.errors import ConfigurationError
from agentq.settings import Settings
from agentq.webhooks.loop import Deliverer, retry_delay
from agentq.webhooks.records import Delivery, DeliveryState
from agentq.webhooks.sender import Answer
from agentq.webhooks.signing import message_id, secret_keys, signature
from agentq.webhooks.targets import Allowlist, TargetRefused, resolve_checked, url_problems, webhook_problems

ALLOW = Allowlist.parse(["hooks.example.com", "*.corp.example", "127.0.0.1", "10.0.0.0/8", "nonsense/99"])


def _problems(url: str) -> list[str]:
    return [p.message for p in url_problems(url, "/u", ALLOW)]


def test_the_published_standard_webhooks_vector_signs_the_same():
    """The convention's example (secret, id, timestamp, body) and the signature its reference libraries give."""
    keys = secret_keys("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
    assert signature(keys, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, b'{"test": 2432232314}') == \
        "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_secrets_rotate_with_spaces_and_a_broken_whsec_is_named_without_its_value():
    keys = secret_keys("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw plain-old-secret")
    assert keys[1] == b"plain-old-secret"
    assert len(signature(keys, "msg_x", 1, b"{}").split(" ")) == 2
    with pytest.raises(ConfigurationError) as caught:
        secret_keys("whsec_not*base64")
    assert "AGENTQ_WEBHOOK_SECRET" in str(caught.value) and "not*base64" not in str(caught.value)


def test_message_ids_are_stable_and_never_carry_a_dot():
    assert message_id("job.with.dots", "job.finished") == message_id("job.with.dots", "job.finished")
    assert message_id("a", "job.finished") != message_id("b", "job.finished")
    assert "." not in message_id("job.with.dots", "event 1-0")


@pytest.mark.parametrize("url, fragment", [
    ("https://hooks.example.com/x", None),
    ("https://a.b.corp.example/x", None),
    ("http://127.0.0.1:8080/x", None),  # named by itself: plain http allowed
    ("https://10.9.8.7/x", None),  # private, but inside a listed network
    ("http://10.9.8.7/x", "must be https"),  # a network lists it, not by itself
    ("http://a.corp.example/x", "must be https"),
    ("https://corp.example/x", "not in the webhook allowlist"),  # `*.` means subdomains only
    ("https://hooks.example.com.evil.org/x", "not in the webhook allowlist"),
    ("https://127.0.0.2/x", "not in the webhook allowlist"),
    ("https://169.254.169.254/latest", "not in the webhook allowlist"),
    ("https://[::ffff:7f00:1]/x", "not in the webhook allowlist"),
    ("https:///x", "with a host"),
    ("https://[::1/x", "not a valid URL"),
    ("", "expected an http(s) URL"),
])
def test_urls_against_the_allowlist(url, fragment):
    problems = _problems(url)
    if fragment is None:
        assert problems == []
    else:
        assert len(problems) == 1 and fragment in problems[0], problems


def test_a_private_address_listed_only_by_a_wildcard_name_is_refused():
    wide = Allowlist.parse(["*.internal"])
    assert "loopback, private or link-local" in url_problems("https://x.localhost/", "", Allowlist.parse(
        ["*.localhost"]))[0].message
    assert url_problems("https://a.internal/", "", wide) == []


def test_the_webhook_object_names_each_problem_with_its_pointer():
    found = webhook_problems({"url": "https://hooks.example.com/", "events": ["job.finished", "job.finished",
                                                                            "nope"], "extra/field": 1}, "/o", ALLOW)
    assert sorted((p.pointer, p.message.split(";")[0]) for p in found) == [
        ("/o/events", "an event is named twice"), ("/o/events/2", "unknown event 'nope'"),
        ("/o/extra~1field", "unknown field")]
    assert [p.pointer for p in webhook_problems({"events": []}, "/o", ALLOW)] == ["/o", "/o/events"]
    assert [p.pointer for p in webhook_problems("https://x", "/o", ALLOW)] == ["/o"]


def test_resolution_checks_every_address(monkeypatch):
    answers = [(2, 1, 6, "", ("93.184.216.34", 443)), (2, 1, 6, "", ("10.0.0.1", 443))]
    monkeypatch.setattr("socket.getaddrinfo", lambda *a, **k: answers)
    with pytest.raises(TargetRefused, match=r"resolves to 10\.0\.0\.1"):
        resolve_checked("hooks.example.com", 443, Allowlist.parse(["hooks.example.com"]))
    listed = Allowlist.parse(["hooks.example.com", "10.0.0.1"])
    assert resolve_checked("hooks.example.com", 443, listed) == [ipaddress.ip_address("93.184.216.34"),
                                                                 ipaddress.ip_address("10.0.0.1")]


def test_the_retry_schedule_doubles_to_an_hour_and_honours_retry_after():
    delays = [retry_delay(n, 5.0, jitter=lambda: 0.5) for n in range(1, 14)]
    assert delays[:4] == [5.0, 10.0, 20.0, 40.0] and delays[-1] == 3600.0
    assert retry_delay(1, 5.0, retry_after_s=120, jitter=lambda: 0.5) == 120
    assert retry_delay(1, 5.0, retry_after_s=10 ** 6, jitter=lambda: 0.5) == 3600


def test_outcomes_end_on_2xx_on_410_and_after_the_retry_window() -> None:
    settings = Settings(webhook_retry_s=100, webhook_backoff_s=5)
    now = [1000.0]
    # only its outcome rules are used here: no store, no sender
    deliverer = Deliverer(None, None, settings, clock=lambda: now[0])  # type: ignore[arg-type]
    fresh = Delivery(id="msg_a", job_id="j", type="job.finished", url="https://x/", created_at=1000.0)
    done, next_at = deliverer.outcome(fresh, Answer(204, None, None, 1.0))
    assert done.state is DeliveryState.DELIVERED and next_at is None
    retried, next_at = deliverer.outcome(fresh, Answer(500, "answered 500", None, 1.0))
    assert retried.state is DeliveryState.PENDING and next_at is not None and 1004 <= next_at <= 1006
    gone, _ = deliverer.outcome(fresh, Answer(410, "answered 410", None, 1.0))
    assert gone.state is DeliveryState.FAILED
    now[0] = 1099.0
    late, next_at = deliverer.outcome(retried, Answer(None, "ConnectError", None, 1.0))
    assert late.state is DeliveryState.FAILED and next_at is None and len(late.attempts) == 2


def test_a_broken_whsec_secret_stops_the_process_at_start_without_showing_it(monkeypatch):
    from agentq.settings import load_settings

    monkeypatch.setenv("AGENTQ_WEBHOOK_SECRET", "whsec_not*base64")
    with pytest.raises(ConfigurationError) as caught:
        load_settings()
    assert "AGENTQ_WEBHOOK_SECRET" in str(caught.value) and "base64" in str(caught.value)
    assert "not*base64" not in str(caught.value)
    monkeypatch.setenv("AGENTQ_WEBHOOK_SECRET", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw plain")
    assert load_settings().webhook_secret is not None
