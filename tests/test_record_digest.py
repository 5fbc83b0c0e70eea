"""Tests of mlflow_mia.config.record_digest, the package's one settings digest."""

import hashlib
import json
from pathlib import Path

import pytest

from mlflow_mia.config import record_digest


def test_record_digest_is_sha256_of_sorted_key_json():
    record = {"b": [1, 2.5, None], "a": {"y": "x", "x": True}}
    expected = hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()
    assert record_digest(record, length=64) == expected
    assert record_digest(record) == expected[:16]
    assert record_digest({"a": {"x": True, "y": "x"}, "b": [1, 2.5, None]}) == record_digest(record)


def test_record_digest_tells_records_apart_and_writes_other_values_as_str():
    assert record_digest({"num_masks": 10}) != record_digest({"num_masks": 11})
    assert record_digest({"num_masks": 10}) != record_digest({"num_masks": "10"}) != record_digest([10])
    assert record_digest({"path": Path("a/b")}) == record_digest({"path": "a/b"})


@pytest.mark.parametrize("length", [0, 65, -1])
def test_record_digest_rejects_a_length_outside_1_to_64(length):
    with pytest.raises(ValueError, match=f"length must be 1..64 hex characters, got {length}"):
        record_digest({}, length=length)
