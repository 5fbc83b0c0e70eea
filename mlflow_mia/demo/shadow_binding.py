"""Bind a shadow record to its shadows' weights and to the pools it is for, and check the binding on signals.

:func:`~mlflow_mia.demo.shadows.train_shadows` writes a record
(:class:`~mlflow_mia.attacks.shadow_record.ShadowRecord`) that names, beside which candidate
each shadow trained on, the sha256 weights digest of each registered shadow
(:func:`shadow_weights`) and the keyed digest of each pool it is for (:func:`pool_digests`,
:func:`~mlflow_mia.tracking.gate_history.pool_digest`). An audit refuses a record whose
shadows or pool are not the ones it audits with
(:func:`~mlflow_mia.attacks.shadow_record.check_shadow_record`); :func:`check_signals_record`
applies that check to precomputed signals (:func:`~mlflow_mia.demo.shadows.with_shadow_membership`).
"""

from __future__ import annotations

from typing import Sequence

from mlflow_mia.attacks.shadow_record import ShadowRecord, check_shadow_record
from mlflow_mia.hashing import HashKey
from mlflow_mia.models.resolve import resolve_model
from mlflow_mia.tracking.gate_history import pool_digest

__all__: list[str] = []

#: Version tag of a registered shadow: its ``sha256:`` weights digest, so a resumed build need not load it.
SHADOW_WEIGHTS_TAG = "mlflow_mia.shadow_weights"


def pool_digests(pools: Sequence, candidates: Sequence[str], key: HashKey) -> tuple:
    """The keyed digests of the pools a shadow record is for; checked before any shadow trains.

    Parameters
    ----------
    pools : sequence of AuditDataset
        The audited pool(s): texts and labels.
    candidates : sequence of str
        The candidates' sha256 text hashes (:func:`mlflow_mia.data.text_hash`).
    key : HashKey
        The record's key.

    Returns
    -------
    tuple of str
        :func:`~mlflow_mia.tracking.gate_history.pool_digest` of each pool (16 hex), without repeats.

    Raises
    ------
    ValueError
        No pool (the record would bind to none, and an audit refuses it), or a pool text that
        is not a candidate (it would have no IN shadow).
    """
    if not pools:
        raise ValueError("the shadow record is bound to the pool(s) it is for, and an audit of another pool refuses "
                         "it: give the audited pool (mlflow-mia train-shadows --pool POOL, or train_shadows(..., "
                         "pools=[AuditDataset(...)]))")
    known = set(candidates)
    for i, pool in enumerate(pools):
        lacking = sum(h not in known for h in pool.text_hashes)
        if lacking:
            raise ValueError(f"{lacking} text(s) of pool {i + 1} are not candidates, so no shadow would train on "
                             "them: put every audited text (pool and population) in the candidates")
    return tuple(dict.fromkeys(pool_digest(p.text_hashes, p.labels, key) for p in pools))


def shadow_weights(uris: Sequence[str], *, client) -> tuple:
    """The ``sha256:`` weights digest of each registered shadow, in order.

    Read from the version tag :data:`SHADOW_WEIGHTS_TAG`; a version without it (registered
    before the tag) is loaded once (:func:`~mlflow_mia.models.resolve.resolve_model`), hashed
    (``weights_id``) and tagged. A wrong tag cannot pass an audit: the audit hashes the weights
    it loads and refuses a record that differs.

    Parameters
    ----------
    uris : sequence of str
        Version-pinned URIs ``models:/<name>/<version>``.
    client : mlflow.MlflowClient
    """
    out = []
    for uri in uris:
        name, version = uri[len("models:/"):].rsplit("/", 1)
        digest = (client.get_model_version(name, version).tags or {}).get(SHADOW_WEIGHTS_TAG)
        if not digest:
            digest = resolve_model(uri, role="shadow").lm.weights_id
            client.set_model_version_tag(name, version, SHADOW_WEIGHTS_TAG, digest)
        out.append(digest)
    return tuple(out)


def check_signals_record(signals, record: ShadowRecord, key, *, pool) -> None:
    """:func:`~mlflow_mia.attacks.shadow_record.check_shadow_record` on signals that name their models' weights.

    Parameters
    ----------
    signals : AuditSignals
        ``info["models"][role]["weights"]`` for each reference role (what stage 1 records).
    record : ShadowRecord
    key : HashKey, bytes or str
        The record's key (the pool digest is keyed with it).
    pool : AuditDataset

    Raises
    ------
    ValueError
        A reference without a recorded weights digest (signals built by hand: give
        ``info={"models": {role: {"weights": ...}}}``), and every refusal of ``check_shadow_record``.
    """
    key = key if isinstance(key, HashKey) else HashKey.from_bytes(key, source="argument")
    models = (signals.info or {}).get("models") or {}
    weights = [(models.get(role) or {}).get("weights") for role in signals["references"].roles]
    if not all(weights):
        raise ValueError("the signals do not name their reference models' weights (info['models'][role]['weights'])"
                         ", so the shadow record cannot be checked against them: compute the signals with "
                         "compute_audit_signals, with the record's shadows as the references")
    check_shadow_record(record, weights=weights, pool_digest=pool_digest(pool.text_hashes, pool.labels, key))
