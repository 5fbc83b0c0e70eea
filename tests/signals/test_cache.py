"""The on-disk cache under attack: shared names, concurrent first use, damaged files."""

from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import random
import sqlite3

import numpy as np
import pytest

from mlflow_mia.config import SignalConfig, record_digest
from mlflow_mia.signals import MaskedLM, SignalCache, compute_signals
from mlflow_mia.signals.cache import CacheCorruptError, SqliteSpecStore
from mlflow_mia.signals.testing import tiny_bert

TEXTS = ["the cat sat on the mat .", "a dog ran in the park today .", "stocks fell sharply on monday .",
         "the minister said the bill would pass .", "rain is expected over the weekend ."]
CONFIG = SignalConfig(num_masks=2)


def test_same_name_other_weights_never_share_cache_rows(tmp_path):
    """Two models both called models:/tgt/2 (two tracking servers) get their own cache rows."""
    model_a, tok = tiny_bert(seed=1)
    model_b, _ = tiny_bert(tok, seed=2)
    a = MaskedLM(model_a, tok, model_id="models:/tgt/2")
    b = MaskedLM(model_b, tok, model_id="models:/tgt/2")
    cache = SignalCache(tmp_path)
    first = compute_signals(a, TEXTS, CONFIG, cache=cache, progress=False)
    second = compute_signals(b, TEXTS, CONFIG, cache=cache, progress=False)
    fresh = compute_signals(MaskedLM(model_b, tok), TEXTS, CONFIG, progress=False)
    np.testing.assert_allclose(second.values, fresh.values, rtol=0, atol=1e-5)
    assert not np.allclose(first.values, second.values)
    assert a.weights_id != b.weights_id and a.model_id == b.model_id


def test_same_weights_under_two_names_share_the_cache(tmp_path):
    model, tok = tiny_bert(seed=1)
    cache = SignalCache(tmp_path)
    compute_signals(MaskedLM(model, tok, model_id="models:/tgt/2"), TEXTS, CONFIG, cache=cache, progress=False)
    assert cache.count() == len(TEXTS)
    compute_signals(MaskedLM(model, tok, model_id="runs:/abc/model"), TEXTS, CONFIG, cache=cache, progress=False)
    assert cache.count() == len(TEXTS)


def _register(args):
    path, spec = args
    store = SignalCache(path)
    try:
        return store.register(spec)
    finally:
        store.close()


def test_concurrent_first_use_of_a_key_does_not_race(tmp_path):
    spec = {"weights": "sha256:x", "kind": "energy"}
    ctx = mp.get_context("spawn")
    for trial in range(3):
        path = str(tmp_path / f"t{trial}")
        with ctx.Pool(8) as pool:
            keys = pool.map(_register, [(path, spec)] * 8)
        assert len(set(keys)) == 1


def test_a_file_that_is_not_a_database_is_named_with_the_fix(tmp_path):
    (tmp_path / "signals.sqlite").write_bytes(b"garbage" * 1000)
    with pytest.raises(CacheCorruptError, match=r"signals\.sqlite.*delete it"):
        SignalCache(tmp_path)


def test_a_truncated_file_is_named_with_the_fix(tmp_path):
    model, tok = tiny_bert(seed=1)
    cache = SignalCache(tmp_path)
    compute_signals(MaskedLM(model, tok), TEXTS * 40, SignalConfig(num_masks=1), cache=cache, progress=False)
    cache.close()
    path = tmp_path / "signals.sqlite"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CacheCorruptError, match="delete it"):
        reopened = SignalCache(tmp_path)
        reopened.get_many(reopened.register({"x": 1}), ["a"])


def _filled_cache(path, n_rows=200):
    cache = SignalCache(path)
    rng = np.random.default_rng(0)
    rows = {f"{i:064x}": (float(rng.normal(30, 5)), int(rng.integers(5, 50)), bool(i % 7 == 0),
                          rng.normal(-3, 1, size=int(rng.integers(1, 20))).astype(np.float32)) for i in range(n_rows)}
    key = cache.register({"weights": "sha256:abc"})
    cache.put_many(key, rows)
    cache.close()
    return key, rows


def test_random_overwrites_never_change_a_cached_value_silently(tmp_path):
    """60 random 8-byte overwrites: each either raises CacheCorruptError or returns only intact rows."""
    src = tmp_path / "src"
    key, rows = _filled_cache(src)
    original = (src / "signals.sqlite").read_bytes()
    rng = random.Random(0)
    detected = intact = 0
    for trial in range(60):
        folder = tmp_path / f"t{trial}"
        folder.mkdir()
        data = bytearray(original)
        at = rng.randrange(100, len(data) - 8)
        data[at:at + 8] = rng.randbytes(8)
        (folder / "signals.sqlite").write_bytes(bytes(data))
        try:
            got = SignalCache(folder).get_many(key, rows)
        except CacheCorruptError:
            detected += 1
            continue
        for h, (energy, n, truncated, lp, stats) in got.items():
            assert stats is None  # written without Min-K%++ statistics
            want = rows[h]
            assert (energy, n, truncated) == (want[0], want[1], want[2])
            np.testing.assert_array_equal(lp, want[3])
        intact += 1
    assert detected + intact == 60


def test_a_row_with_a_bad_checksum_is_recomputed(tmp_path, caplog):
    key, rows = _filled_cache(tmp_path, n_rows=3)
    h = next(iter(rows))
    conn = sqlite3.connect(tmp_path / "signals.sqlite")
    conn.execute("UPDATE signal_rows SET energy = -1.9e276 WHERE text_hash = ?", (h,))
    conn.commit()
    conn.close()
    got = SignalCache(tmp_path).get_many(key, rows)
    assert h not in got and len(got) == 2
    assert "failed their MAC" in caplog.text


def test_another_spec_under_a_key_is_an_error(tmp_path):
    store = SignalCache(tmp_path)
    key = store.register({"a": 1})
    store._conn.execute("UPDATE specs SET spec = ? WHERE key = ?", ('{"a": 2}', key))
    store._conn.commit()
    with pytest.raises(CacheCorruptError, match="another spec"):
        store.register({"a": 1})
    assert isinstance(store, SqliteSpecStore)


def test_cache_key_is_the_record_digest_of_the_spec_and_keeps_its_format(tmp_path):
    """The key is ``record_digest(spec, length=32)``, the same as caches written before it, so they stay valid."""
    spec = {"weights": "sha256:ab", "tokenizer_id": "cd", "kind": "energy", "num_masks": 10, "max_length": None}
    key = SignalCache(tmp_path).register(spec)
    assert key == record_digest(spec, length=32)
    assert key == hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:32]
    assert SignalCache(tmp_path).register(dict(reversed(list(spec.items())))) == key


def test_nan_energy_round_trips(tmp_path):
    cache = SignalCache(tmp_path)
    key = cache.register({"k": 1})
    cache.put_many(key, {"h": (float("nan"), 0, False, np.zeros(0, dtype=np.float32))})
    energy, n, truncated, lp, stats = cache.get_many(key, ["h"])["h"]
    assert np.isnan(energy) and n == 0 and lp.size == 0 and stats is None


def test_a_full_disk_says_free_space_and_keeps_the_healthy_cache(tmp_path, monkeypatch):
    """SQLITE_FULL, ENOSPC and an I/O error with no space left are a full disk, never a cache to delete."""
    import errno

    import mlflow_mia.signals.cache as cache_module
    from mlflow_mia.signals.cache import CacheDiskFullError

    key, rows = _filled_cache(tmp_path / "c", n_rows=20)
    cache = SignalCache(tmp_path / "c")
    cache._conn.execute("PRAGMA max_page_count = 1")  # clamped to the file's size: it cannot grow (SQLITE_FULL)
    more = {f"{i:064x}": (1.0, 400, False, np.zeros(400, dtype=np.float32)) for i in range(100, 300)}
    with pytest.raises(CacheDiskFullError) as info:
        cache.put_many(key, more)
    message = str(info.value)
    assert message.startswith(f"the disk holding the cache file {tmp_path / 'c' / 'signals.sqlite'} is full "
                              "(database or disk is full")
    assert "free space on it" in message and "The cache is not damaged: keep it" in message
    assert "delete" not in message and not isinstance(info.value, CacheCorruptError)
    cache.close()
    kept = SignalCache(tmp_path / "c")  # the file is healthy: every row written before is there
    assert set(kept.get_many(key, rows)) == set(rows) and kept.count() == len(rows)
    # an I/O error is a full disk only when the disk has no room left; otherwise the file is suspect
    with pytest.raises(CacheCorruptError, match="delete it"):
        with kept._guard():
            raise sqlite3.OperationalError("disk I/O error")
    monkeypatch.setattr(cache_module, "_free_bytes", lambda path: 4096)
    with pytest.raises(CacheDiskFullError, match=r"is full \(disk I/O error, 0.0 MiB free\): free space"):
        with kept._guard():
            raise sqlite3.OperationalError("disk I/O error")
    # ENOSPC while making the cache folder or the store key: the same advice, not a bare OSError
    full = OSError(errno.ENOSPC, "No space left on device")

    def no_space(*args, **kwargs):
        raise full

    monkeypatch.setattr(cache_module.os, "makedirs", no_space)
    with pytest.raises(CacheDiskFullError, match=r"the disk holding the cache folder .*new is full \(\[Errno 28\]"):
        SignalCache(tmp_path / "new")
    monkeypatch.undo()
    monkeypatch.setattr(cache_module, "load_store_key", no_space)
    with pytest.raises(CacheDiskFullError, match=r"the disk holding the cache file .*signals.sqlite is full"):
        SignalCache(tmp_path / "c")
