"""The shadow record attacked with tiny trained shadows: swapped IN/OUT, other shadows, another pool, no URIs.

Covers mlflow_mia/demo/shadow_binding.py, the checks of mlflow_mia/attacks/shadow_record.py as an audit runs
them (stage 2's direction check, mlflow_mia.pipeline.membership.checked_shadow_record) and the record's digest
in the result.
"""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from functools import partial
from types import SimpleNamespace

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from mlflow_mia.attacks.lira_online import lira_online_scores
from mlflow_mia.attacks.shadow_record import ShadowRecord, shadow_membership
from mlflow_mia.audits.membership import compute_audit_signals, run_audit, score_audit
from mlflow_mia.config import AuditConfig, MetricConfig, SignalConfig
from mlflow_mia.data import AuditDataset, PopulationSet, text_hash
from mlflow_mia.demo.registry import torch_threads
from mlflow_mia.demo.shadow_binding import check_signals_record, pool_digests
from mlflow_mia.demo.shadow_record import balanced_halves
from mlflow_mia.demo.specs import TrainConfig
from mlflow_mia.demo.train import train_mlm
from mlflow_mia.audits.membership.signals import AuditSignals
from mlflow_mia.audits.membership.models import AuditModels
from mlflow_mia.hashing import HashKey, keyed_hash
from mlflow_mia.pipeline.membership import checked_shadow_record, shadow_record_entry
from mlflow_mia.signals.model import MaskedLM
from mlflow_mia.signals.testing import WORDS, tiny_bert
from mlflow_mia.signals.types import SignalResult
from mlflow_mia.tracking.gate_history import pool_digest

KEY = HashKey.from_bytes(b"k" * 32, source="test")
_RNG = np.random.default_rng(2)
TEXTS = [" ".join(_RNG.choice(WORDS[:-6], size=6)) for _ in range(24)]  # 24 candidates: the pool, the population
POOL = AuditDataset(texts=TEXTS[:8], labels=[1, 0] * 4)
POPULATION = PopulationSet(texts=TEXTS[8:])
CONFIG = AuditConfig(attacks=("lira_online", "lira_offline", "rmia"), signal=SignalConfig(num_masks=2),
                     metrics=MetricConfig(fprs=(0.1,), bootstrap_rounds=10))
TRAIN = TrainConfig(steps=60, batch_size=4, learning_rate=0.01, max_length=16, warmup_ratio=0.0)


@pytest.fixture(scope="module")
def trained():
    """4 tiny shadows on balanced halves of the 24 candidates, a target trained on the pool's members, the record."""
    base, tokenizer = tiny_bert(seed=0, hidden=16, layers=1)
    member = balanced_halves(len(TEXTS), 4, seed=1)
    with torch_threads(1):
        shadows = []
        for j in range(4):
            model = copy.deepcopy(base)
            train_mlm(model, tokenizer, [t for t, m in zip(TEXTS, member[j]) if m], replace(TRAIN, seed=j),
                      progress=False)
            shadows.append(MaskedLM(model, tokenizer, model_id=f"shadow-{j}"))
        target = copy.deepcopy(base)
        train_mlm(target, tokenizer, [t for t, y in zip(POOL.texts, POOL.labels) if y], TRAIN, progress=False)
    record = ShadowRecord(tuple(keyed_hash(text_hash(t), KEY) for t in TEXTS), member, KEY.check, "candidates", {},
                          1, uris=(), weights=tuple(s.weights_id for s in shadows),
                          pools=pool_digests([POOL], [text_hash(t) for t in TEXTS], KEY))
    return SimpleNamespace(shadows=shadows, target=MaskedLM(target, tokenizer, model_id="target"), record=record,
                           other=MaskedLM(tiny_bert(seed=9, hidden=16, layers=1)[0], tokenizer, model_id="other"))


def _audit(trained, record, references=None):
    with torch_threads(1):
        return run_audit(trained.target, POOL, POPULATION, references=references or trained.shadows, config=CONFIG,
                         shadow_membership=partial(shadow_membership, record, key=KEY), progress=False)


def test_an_audit_refuses_a_record_with_in_and_out_swapped_by_naming_the_direction_check(trained):
    result = _audit(trained, trained.record)
    direction = result.info["shadow_direction"]
    assert direction["mean_difference"] > 0 and direction["upper"] > 0 and direction["n_units"] == 16
    swapped = replace(trained.record, membership=~trained.record.membership)
    # the threat: scored with the swapped record, lira_online ranks the members below the non-members
    with torch_threads(1):
        signals = compute_audit_signals(AuditModels.build(trained.target, references=trained.shadows, config=CONFIG),
                                        POOL, POPULATION, replace(CONFIG, attacks=("lira_offline",)), progress=False)
    member = shadow_membership(swapped, list(POOL.texts) + list(POPULATION.texts), KEY)
    scores = lira_online_scores(signals["target"].values[:8], signals["references"].values[:, :8], member[:8],
                                spread_in=1.0, spread_out=1.0)
    assert roc_auc_score(POOL.labels, scores) < 0.1 and result.metrics["lira_online/auc"] > 0.9  # 1 - the real one
    with pytest.raises(ValueError, match=r"shadow record IN/OUT direction check failed: on 16 population texts the "
                                         r"shadows that trained on a text \(IN\) fit it worse"):
        _audit(trained, swapped)
    with pytest.raises(ValueError, match="shadow record IN/OUT direction check failed"):  # precomputed signals too
        score_audit(AuditSignals({**signals.signals, "shadow_membership": member}, info=signals.info), POOL,
                    POPULATION, CONFIG)


def test_a_record_for_other_shadows_or_another_pool_is_refused_even_without_uris(trained, tmp_path):
    assert trained.record.uris == ()  # local models, no URIs: the check by weights still runs
    path = tmp_path / "record.json"
    trained.record.to_json(path)
    options = SimpleNamespace(shadow_record=str(path), hash_key=KEY)

    def refs(models):
        return [SimpleNamespace(lm=m, resolved_uri=None) for m in models]

    assert checked_shadow_record(options, refs(trained.shadows), pool=POOL).digest == trained.record.digest
    others = trained.shadows[:2] + [trained.other] + trained.shadows[3:]
    with pytest.raises(ValueError, match=rf"the shadow record {path}'s shadows are not the audit's reference models: "
                                         r"reference 3 has weights sha256:\w{12}, the record's shadow 3"):
        checked_shadow_record(options, refs(others), pool=POOL)
    with pytest.raises(ValueError, match="reference 1 has weights .* reference 2 has weights"):
        checked_shadow_record(options, refs([trained.shadows[1], trained.shadows[0], *trained.shadows[2:]]), pool=POOL)
    relabelled = AuditDataset(texts=POOL.texts, labels=1 - POOL.labels)
    with pytest.raises(ValueError, match=r"was made for the pool\(s\) \w{16} \(keyed digests\), not the audited pool"):
        checked_shadow_record(options, refs(trained.shadows), pool=relabelled)
    with pytest.raises(ValueError, match="not the audited pool"):
        checked_shadow_record(options, refs(trained.shadows), pool=AuditDataset(texts=TEXTS[:6], labels=[1, 0] * 3))
    # a record written before the binding (no weights, no pools): loadable, never usable
    old = {k: v for k, v in trained.record.to_dict().items() if k not in ("format", "weights", "pools")}
    path.write_text(json.dumps(old))
    with pytest.raises(ValueError, match="cannot be checked: re-create the record with mlflow-mia train-shadows"):
        checked_shadow_record(options, refs(trained.shadows), pool=POOL)


def test_precomputed_signals_are_checked_against_the_records_weights_and_pool(trained):
    roles = ("reference", "reference_2", "reference_3", "reference_4")
    sig = SignalResult.from_arrays(np.arange(24.0), n_tokens=np.full(24, 5))
    signals = AuditSignals({"references": [sig] * 4},
                           info={"models": {r: {"weights": w} for r, w in zip(roles, trained.record.weights)}})
    check_signals_record(signals, trained.record, KEY, pool=POOL)
    wrong = AuditSignals(signals.signals, info={"models": {r: {"weights": trained.other.weights_id} for r in roles}})
    with pytest.raises(ValueError, match="reference 1 has weights"):
        check_signals_record(wrong, trained.record, KEY, pool=POOL)
    with pytest.raises(ValueError, match="do not name their reference models' weights"):
        check_signals_record(AuditSignals(signals.signals), trained.record, KEY, pool=POOL)
    with pytest.raises(ValueError, match="not the audited pool"):
        check_signals_record(signals, trained.record, KEY, pool=AuditDataset(texts=TEXTS[:6], labels=[1, 0] * 3))


def test_a_record_needs_a_pool_of_candidates_and_the_result_names_the_records_digest(trained):
    hashes = [text_hash(t) for t in TEXTS]
    with pytest.raises(ValueError, match="give the audited pool"):
        pool_digests([], hashes, KEY)
    with pytest.raises(ValueError, match="1 text\\(s\\) of pool 1 are not candidates"):
        pool_digests([AuditDataset(texts=("a text no shadow saw", TEXTS[0]), labels=[1, 0])], hashes, KEY)
    assert pool_digests([POOL, POOL], hashes, KEY) == (pool_digest(POOL.text_hashes, POOL.labels, KEY),)
    result = _audit(trained, trained.record)
    entry = shadow_record_entry(trained.record, "r.json", pool=POOL, key=KEY.key, result=result)
    assert entry["digest"] == trained.record.digest and len(entry["digest"]) == 32
    assert entry["pool"] == trained.record.pools[0] and entry["shadows"] == 4
    assert entry["weights"] == [w[:23] for w in trained.record.weights]
    assert entry["direction"] == result.info["shadow_direction"]

