"""Tamper-evident stores (issue 21, High 2 and 4): keyed row MACs, the store key, config twins.

The attacker can write the cache folder but cannot read the store key file. The
attacks: rewrite rows and recompute the plain sha256 checksum the cache used before
(its formula is public), or a MAC under a key of their own; give a model the
weights of a cached one and another ``config.json``.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import stat
import threading

import numpy as np
import pytest

from mlflow_mia.audits.membership import run_audit
from mlflow_mia.config import AuditConfig, MetricConfig, NeighbourhoodConfig, SignalConfig
from mlflow_mia.data import AuditDataset, PopulationSet
from mlflow_mia.signals import MaskedLM, SignalCache, compute_signals
from mlflow_mia.signals.entity_confidence import ConfidenceCache, TokenClassifier, entity_confidence
from mlflow_mia.signals.ner_testing import tiny_token_classifier
from mlflow_mia.signals.store_key import KEY_ENV, derive_key, load_store_key, row_mac, store_key_path
from mlflow_mia.signals.testing import WORDS, tiny_bert

CONFIG = SignalConfig(num_masks=2)
ALPHA = [w for w in WORDS if w.isalpha()]


def _sentences(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(ALPHA, size=int(rng.integers(6, 12)))) + f" {w}"
            for w in rng.choice(ALPHA, size=n)]


def _plain_checksum(key, text_hash, values) -> str:
    """The public row checksum the caches used before keyed MACs: what an attacker recomputes."""
    h = hashlib.sha256(f"{key}\n{text_hash}".encode())
    for v in values:
        h.update(b"\x00" + (v if isinstance(v, bytes) else repr(v).encode()))
    return h.hexdigest()[:32]


def _poison(path, table: str, column: str, value, *, mac=_plain_checksum) -> int:
    """Set ``column`` of every row of ``table`` to ``value`` and recompute each row's checksum with ``mac``."""
    conn = sqlite3.connect(path)
    columns = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
    values_cols = columns[2:-1]  # key, text_hash, values..., checksum
    rows = conn.execute(f"SELECT {', '.join(columns[:-1])} FROM {table}").fetchall()
    for key, h, *values in rows:
        values[values_cols.index(column)] = value
        conn.execute(f"UPDATE {table} SET {column} = ?, checksum = ? WHERE key = ? AND text_hash = ?",
                     (value, mac(key, h, values), key, h))
    conn.commit()
    conn.close()
    return len(rows)


@pytest.fixture()
def audit_inputs():
    texts = _sentences(100, seed=1)
    pool = AuditDataset(texts=texts[:40], labels=[1] * 20 + [0] * 20)
    return pool, PopulationSet(texts=texts[40:])


AUDIT = AuditConfig(attacks=("loss",), signal=CONFIG, metrics=MetricConfig(fprs=(0.1,), bootstrap_rounds=20))


def test_poisoned_signal_cache_rows_with_recomputed_plain_checksum_are_not_used(tmp_path, audit_inputs, caplog):
    """Every row set to one energy with a valid plain checksum would make any target score AUC 0.5."""
    pool, population = audit_inputs
    lm = MaskedLM(*tiny_bert(seed=4))
    clean = run_audit(lm, pool, population, config=AUDIT, cache=SignalCache(tmp_path), progress=False)
    assert clean.metrics["loss/auc"] != pytest.approx(0.5, abs=0.05)
    n = _poison(tmp_path / "signals.sqlite", "signal_rows", "energy", 1.0)
    assert n == len(pool) + len(population)
    again = run_audit(lm, pool, population, config=AUDIT, cache=SignalCache(tmp_path), progress=False)
    assert again.metrics["loss/auc"] == clean.metrics["loss/auc"]
    np.testing.assert_array_equal(again.samples["score_loss"], clean.samples["score_loss"])
    assert f"{n} row(s) failed their MAC" in caplog.text
    # the recomputed rows were written back under the store key: a third run finds them all
    caplog.clear()
    run_audit(lm, pool, population, config=AUDIT, cache=SignalCache(tmp_path), progress=False)
    assert "failed their MAC" not in caplog.text


def test_poisoned_ner_cache_row_with_recomputed_plain_checksum_is_not_used(tmp_path):
    clf = TokenClassifier(*tiny_token_classifier())
    args = (["the cat sat on {name} ."] * 3, ["red dogs", "ten", "blue cats mat"], ["PER"] * 3)
    clean = entity_confidence(clf, *args, cache=ConfidenceCache(tmp_path), progress=False)
    _poison(tmp_path / "ner_confidence.sqlite", "ner_confidence_rows", "confidence", 0.5)
    got = entity_confidence(clf, *args, cache=ConfidenceCache(tmp_path), progress=False)
    np.testing.assert_array_equal(got, clean)
    assert not np.any(got == 0.5)


def test_poisoned_neighbour_store_row_with_recomputed_plain_checksum_is_not_used(tmp_path):
    from mlflow_mia.signals.neighbours import generate_neighbours

    lm = MaskedLM(*tiny_bert(seed=2))
    texts = _sentences(3, seed=5)
    config = NeighbourhoodConfig(num_neighbours=3)
    clean = generate_neighbours(lm, texts, config=config, cache=SignalCache(tmp_path), progress=False)
    _poison(tmp_path / "neighbours.sqlite", "neighbour_rows", "edits", json.dumps([[[0, 1, "poison"]]] * 3))
    got = generate_neighbours(lm, texts, config=config, cache=SignalCache(tmp_path), progress=False)
    assert got == clean and not any("poison" in x for nb in got for x in nb)


def test_rows_written_under_another_store_key_are_recomputed(tmp_path, monkeypatch, caplog):
    """A cache filled (or forged with the HMAC formula) under key A is not trusted under key B."""
    lm = MaskedLM(*tiny_bert(seed=1))
    texts = _sentences(4, seed=2)
    cache_dir = tmp_path / "cache"
    monkeypatch.setenv(KEY_ENV, str(tmp_path / "a" / "store.key"))
    clean = compute_signals(lm, texts, CONFIG, cache=SignalCache(cache_dir), progress=False)
    forged_key = derive_key(load_store_key(), "sqlite/signal_rows")  # the attacker's own key
    _poison(cache_dir / "signals.sqlite", "signal_rows", "energy", 1.0,
            mac=lambda k, h, values: row_mac(forged_key, ["signal_rows", k, h, *values]))
    monkeypatch.setenv(KEY_ENV, str(tmp_path / "b" / "store.key"))
    got = compute_signals(lm, texts, CONFIG, cache=SignalCache(cache_dir), progress=False)
    np.testing.assert_array_equal(got.values, clean.values)
    assert "4 row(s) failed their MAC" in caplog.text
    assert load_store_key() != forged_key


def test_store_key_file_is_created_private_and_shared_by_concurrent_first_uses(tmp_path, monkeypatch):
    path = tmp_path / "cfg" / "store.key"
    monkeypatch.setenv(KEY_ENV, str(path))
    assert store_key_path() == str(path)
    keys, threads = [], [threading.Thread(target=lambda: keys.append(load_store_key())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(keys) == 8 and len(set(keys)) == 1 and len(keys[0]) == 64
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert sorted(os.listdir(path.parent)) == ["store.key"]  # no temporary files left


def test_store_key_default_location_is_outside_the_cache(tmp_path, monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    assert store_key_path() == str(tmp_path / "config" / "mlflow_mia" / "store.key")


def test_unusable_store_key_files_are_refused_with_the_fix(tmp_path, monkeypatch):
    inside = tmp_path / "cache" / "store.key"
    monkeypatch.setenv(KEY_ENV, str(inside))
    with pytest.raises(ValueError, match=r"lies inside the store folder .*cache: .*Point \$MLFLOW_MIA_STORE_KEY_FILE"):
        SignalCache(tmp_path / "cache")
    assert not inside.exists()
    key = tmp_path / "store.key"
    monkeypatch.setenv(KEY_ENV, str(key))
    key.write_text("x" * 64)
    key.chmod(0o640)
    with pytest.raises(ValueError, match=rf"can be read or written by other users \(mode 0640\); run chmod 600 {key}"):
        load_store_key()
    key.write_text("short")
    key.chmod(0o600)
    with pytest.raises(ValueError, match="holds 5 bytes; use at least 32"):
        load_store_key()
    key.unlink()
    key.mkdir()
    with pytest.raises(ValueError, match="is not a regular file"):
        load_store_key()


def _twin(tmp_path, name: str, **config_changes) -> str:
    """A saved copy of tiny_bert(seed=1) with ``config_changes`` written into its config.json."""
    model, tok = tiny_bert(seed=1)
    folder = tmp_path / name
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(config_changes)
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


@pytest.mark.parametrize("change", [{"hidden_act": "relu"}, {"layer_norm_eps": 0.5}])
def test_config_twin_with_the_same_weights_gets_a_new_cache_key(tmp_path, change):
    texts = _sentences(5, seed=3)
    original = MaskedLM.from_pretrained(_twin(tmp_path, "original"))
    twin = MaskedLM.from_pretrained(_twin(tmp_path, "twin", **change))
    assert twin.weights_id == original.weights_id and twin.config_id != original.config_id
    cache = SignalCache(tmp_path / "cache")
    first = compute_signals(original, texts, CONFIG, cache=cache, progress=False)
    got = compute_signals(twin, texts, CONFIG, cache=cache, progress=False)
    assert cache.count() == 2 * len(texts)  # its own rows, not the original's
    fresh = compute_signals(twin, texts, CONFIG, progress=False)
    np.testing.assert_allclose(got.values, fresh.values, rtol=0, atol=1e-5)
    assert np.max(np.abs(got.values - first.values)) > 1e-3


def test_config_digest_ignores_where_the_model_was_loaded_from(tmp_path):
    model, tok = tiny_bert(seed=1)
    loaded = MaskedLM.from_pretrained(_twin(tmp_path, "saved"))
    assert MaskedLM(model, tok).config_id == loaded.config_id


def test_ner_config_twin_gets_a_new_cache_key(tmp_path):
    model, tok = tiny_token_classifier()
    folder = tmp_path / "ner"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "hidden_act": "relu"}))
    from transformers import AutoModelForTokenClassification

    original = TokenClassifier(model, tok)
    twin = TokenClassifier(AutoModelForTokenClassification.from_pretrained(folder), tok)
    assert twin.weights_id == original.weights_id and twin.config_id != original.config_id
    args = (["the cat sat on {name} ."] * 2, ["red dogs", "ten"], ["PER"] * 2)
    cache = ConfidenceCache(tmp_path / "cache")
    first = entity_confidence(original, *args, cache=cache, progress=False)
    got = entity_confidence(twin, *args, cache=cache, progress=False)
    assert cache.count() == 4
    np.testing.assert_allclose(got, entity_confidence(twin, *args, progress=False), rtol=1e-6)
    assert not np.allclose(got, first)
