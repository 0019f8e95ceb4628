"""ids.py: time-ordered ULID-style ids."""

import re
import time

from agentq.protocol.ids import ALPHABET, encode_ulid, new_id, ulid_time_ms

ULID = re.compile(r"[0-9A-HJKMNP-TV-Z]{26}")


def test_shape():
    identifier = new_id("call")
    prefix, ulid = identifier.split("_", 1)
    assert prefix == "call"
    assert ULID.fullmatch(ulid)
    assert len(ALPHABET) == 32 and not set("ILOU") & set(ALPHABET)


def test_time_prefix_is_now():
    before = time.time_ns() // 1_000_000
    identifier = new_id("job")
    after = time.time_ns() // 1_000_000
    assert before <= ulid_time_ms(identifier) <= after + 1


def test_strictly_increasing_and_unique():
    ids = [new_id("call") for _ in range(5000)]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)


def test_encoding_bounds():
    assert encode_ulid(0, 0) == "0" * 26
    assert encode_ulid(2**48 - 1, 2**80 - 1) == "7" + "Z" * 25
    assert ulid_time_ms("x_" + encode_ulid(1234567, 99)) == 1234567
    assert encode_ulid(1, 0) < encode_ulid(1, 1) < encode_ulid(2, 0)
