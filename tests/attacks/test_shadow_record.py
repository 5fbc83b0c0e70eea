"""attacks/shadow_record.py: the record's digest, its binding to shadows and pool, the IN/OUT direction check."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from mlflow_mia.attacks.shadow_record import (RECORD_FORMAT, ShadowRecord, check_shadow_direction, check_shadow_record,
                                              shadow_record_digest)

WEIGHTS = ("sha256:" + "a" * 64, "sha256:" + "b" * 64, "sha256:" + "c" * 64, "sha256:" + "d" * 64)


def _record(**changes) -> ShadowRecord:
    member = np.array([[True, False, True], [False, True, False], [True, True, False], [False, False, True]])
    record = ShadowRecord(("h1", "h2", "h3"), member, "check", "cand", {"base_model": "b"}, 1, uris=(),
                          weights=WEIGHTS, pools=("pool-a",))
    return replace(record, **changes)


def _shadows(n=60, k=4, seed=0, gap=1.0):
    """Energies (k, n): each text's OUT shadows ~ N(mu_x, 1), its IN shadows ``gap`` nats lower; the halves balanced."""
    rng = np.random.default_rng(seed)
    mu = rng.normal(30.0, 5.0, size=n)
    member = rng.uniform(size=(n, k)).argsort(axis=1) < k // 2
    values = mu + rng.normal(0.0, 1.0, size=(k, n)) - gap * member.T
    return values, member


def test_the_digest_is_stable_across_forms_and_layouts_and_changes_with_any_field(tmp_path):
    record = _record()
    digest = shadow_record_digest(record)
    assert len(digest) == 32 and int(digest, 16) >= 0 and digest == record.digest
    record.to_json(tmp_path / "r.json")
    (tmp_path / "compact.json").write_text(json.dumps(record.to_dict(), separators=(",", ":")))
    assert shadow_record_digest(tmp_path / "r.json") == shadow_record_digest(tmp_path / "compact.json") == digest
    assert shadow_record_digest(record.to_dict()) == digest == ShadowRecord.from_json(tmp_path / "r.json").digest
    flipped = record.membership.copy()
    flipped[0, 0] = ~flipped[0, 0]
    changed = [_record(membership=flipped), _record(membership=~record.membership), _record(weights=WEIGHTS[::-1]),
               _record(pools=("pool-b",)), _record(uris=("models:/s-0/1",) * 4), _record(seed=2),
               _record(key_check="other")]
    digests = {shadow_record_digest(r) for r in changed}
    assert len(digests) == len(changed) and digest not in digests


def test_a_record_is_refused_unless_its_weights_and_pool_are_the_audits_and_an_old_one_says_how_to_recreate_it():
    record = _record()
    check_shadow_record(record, weights=WEIGHTS, pool_digest="pool-a")  # no URIs: the weights are still checked
    with pytest.raises(ValueError, match=r"shadows are not the audit's reference models: reference 3 has weights "
                                         r"sha256:eeeeeeeeeeee, the record's shadow 3 sha256:cccccccccccc\. Give"):
        check_shadow_record(record, weights=WEIGHTS[:2] + ("sha256:" + "e" * 64,) + WEIGHTS[3:], pool_digest="pool-a")
    with pytest.raises(ValueError, match="reference 1 has weights sha256:bbbb.*reference 2 has weights sha256:aaaa"):
        check_shadow_record(record, weights=(WEIGHTS[1], WEIGHTS[0]) + WEIGHTS[2:], pool_digest="pool-a")
    with pytest.raises(ValueError, match="has 4 shadows, but the audit has 3 reference models"):
        check_shadow_record(record, weights=WEIGHTS[:3], pool_digest="pool-a")
    with pytest.raises(ValueError, match=r"was made for the pool\(s\) pool-a \(keyed digests\), not the audited pool "
                                         r"\(pool-b\).*--pool POOL"):
        check_shadow_record(record, weights=WEIGHTS, pool_digest="pool-b")
    # a record of the previous format (no weights, no pools) still loads, but cannot be checked: refused
    old = {k: v for k, v in record.to_dict().items() if k not in ("format", "weights", "pools")}
    loaded = ShadowRecord.from_dict(old)
    assert loaded.weights == () and loaded.pools == () and np.array_equal(loaded.membership, record.membership)
    with pytest.raises(ValueError, match=r"does not name its shadows' weights digests and the pool it was made for "
                                         r"\(written before records were bound to them\), so it cannot be checked: "
                                         r"re-create the record with mlflow-mia train-shadows"):
        check_shadow_record(loaded, weights=WEIGHTS, pool_digest="pool-a")
    with pytest.raises(ValueError, match=f"reads formats up to {RECORD_FORMAT}"):
        ShadowRecord.from_dict({**record.to_dict(), "format": RECORD_FORMAT + 1})


def test_the_direction_check_passes_a_right_record_and_refuses_in_and_out_swapped_by_name():
    values, member = _shadows()
    check = check_shadow_direction(values, member)
    assert check.mean_difference == pytest.approx(1.0, abs=0.3) and check.upper > 0 and not check.reversed
    assert check.n_units == 60 and check.unit == "text" and check.confidence == 0.999
    with pytest.raises(ValueError, match=r"shadow record IN/OUT direction check failed: on 60 population texts "
                                         r".*\(one-sided 99\.9% upper bound -"):
        check_shadow_direction(values, ~member)
    # shadows that learned nothing: unresolved, not refused, in either direction (a wide margin, not a sign test)
    flat, member = _shadows(gap=0.0, seed=1)
    assert not check_shadow_direction(flat, member).reversed and not check_shadow_direction(flat, ~member).reversed


def test_the_direction_check_counts_groups_as_units_and_resolves_nothing_from_one_unit():
    values, member = _shadows(n=40)
    member[1::2] = member[0::2]  # two texts per group share their halves, as train_shadows draws them
    values = values + 1.0 * (~member.T)  # keep the IN texts one nat lower after the copy
    groups = [f"g{i // 2}" for i in range(40)]
    check = check_shadow_direction(values, member, groups=groups)
    assert check.unit == "group" and check.n_units == 20 and check.mean_difference > 0
    with pytest.raises(ValueError, match="on 20 population groups"):
        check_shadow_direction(values, ~member, groups=groups)
    one = check_shadow_direction(values[:, :2], ~member[:2], groups=["g"] * 2)
    assert one.n_units == 1 and np.isnan(one.upper) and one.to_dict()["upper"] is None
    # texts that no shadow saw (not candidates: all OUT) have no IN statistic and do not count
    assert check_shadow_direction(values, np.zeros_like(member)).n_units == 0
    with pytest.raises(ValueError, match="does not pair up"):
        check_shadow_direction(values, member[:5])
