"""Stage 1 of the canary audit: every model call, nothing else -> :class:`CanarySignals`.

The signal (energy or PLL) of every canary under the target (and the reference), and
of each secret-format template's candidate secrets under the target. Stage 2
(:func:`mlflow_mia.audits.canary.scoring.score_canaries`) turns them into exposures,
metrics and bounds without running a model.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

import numpy as np

from mlflow_mia.canaries import CanarySet
from mlflow_mia.canaries.config import CanaryAuditConfig
from mlflow_mia.signals.dispatch import check_model_kinds, sequence_values

__all__ = ["CanarySignals", "canary_signals", "candidate_secrets"]

log = logging.getLogger(__name__)


class CanarySignals(NamedTuple):
    """What the canary audit reads from the models (stage 1).

    Attributes
    ----------
    target : ndarray of shape (m,), float64
        Signal of each canary under the target (nats; lower = likelier).
    reference : ndarray of shape (m,) or None
        The same under the reference model (None without one).
    candidates : dict of str to (ndarray, bool)
        By secret-format template id: the target's signal of each candidate secret (shape
        ``(n_candidates,)`` or the whole space) and whether those are every secret of the space.
    models : dict
        ``{role: {"identity": ..., "name": ...}}``; the reference also has ``"weights"``.
    """

    target: np.ndarray
    reference: np.ndarray | None
    candidates: dict
    models: dict


def score_texts(lm, texts, config: CanaryAuditConfig, *, cache=None, device=None, progress: bool = False,
                desc: str | None = None, text_key=None) -> np.ndarray:
    """The signal (energy or PLL, nats; a causal LM's log-perplexity; lower = likelier) of every text, in order.

    ``text_key``: the key of the cache rows (:func:`~mlflow_mia.signals.compute_signals`);
    canary texts and candidates are always cached under one, never under their sha256.
    """
    return sequence_values(lm, list(texts), config.signal_config(), cache=cache, device=device, progress=progress,
                           desc=desc, text_key=text_key)


def _canary_cache(cache, hash_key):
    """``(cache, key)`` for canary texts and candidates: rows keyed by the audit's hash key, or no cache.

    A bare sha256 of a canary or candidate text in the cache lets anyone who reads the file
    test guessed secrets offline (a secret-format space of 10**9 is searched in minutes), so
    rows are keyed by ``HMAC-SHA256(key, sha256(text))``. Without a kept key (none given, or
    a random one drawn for this audit) the rows could never be found again: nothing is cached.
    """
    if cache is None:
        return None, None
    if hash_key is None or getattr(hash_key, "is_random", False):
        log.info("canary texts and candidates are not cached: the audit's hash key is random (not kept), so keyed "
                 "rows could not be found again; set --hash-key-file or MLFLOW_MIA_HASH_KEY to cache them")
        return None, None
    return cache, hash_key


def candidate_secrets(template, n_candidates: int, *, seed: int) -> tuple[list[str], bool]:
    """Candidate secrets of a secret-format template: ``(secrets, exact)``.

    Every secret of the space (zero-padded, in order) when ``10 ** N <= n_candidates``
    (``exact=True``), else ``n_candidates`` secrets drawn uniformly at random with
    replacement, digit by digit (``numpy.random.default_rng(seed)``).

    Examples
    --------
    >>> from mlflow_mia.canaries import Template
    >>> secrets, exact = candidate_secrets(Template("t", "pin {digits:2}"), 100, seed=0)
    >>> exact, len(secrets), secrets[:3]
    (True, 100, ['00', '01', '02'])
    >>> candidate_secrets(Template("t", "pin {digits:6}"), 50, seed=0)[1]
    False
    """
    n = template.secret_length
    if template.space_size <= n_candidates:
        return [f"{i:0{n}d}" for i in range(template.space_size)], True
    digits = np.random.default_rng(seed).integers(0, 10, size=(n_candidates, n))
    return ["".join(map(str, row)) for row in digits], False


def canary_signals(target, canaries: CanarySet, *, reference=None, config: CanaryAuditConfig | None = None,
                   cache=None, device=None, progress: bool = False, hash_key=None) -> CanarySignals:
    """Stage 1: score the canaries under the target (and reference) and each template's candidate secrets.

    Parameters are those of :func:`~mlflow_mia.audits.canary.run.canary_audit`. Candidates of the
    i-th secret-format template are drawn with seed ``config.seed + 1 + i`` (:func:`candidate_secrets`).

    Returns
    -------
    CanarySignals

    Raises
    ------
    ValueError
        A reference of another kind than the target (causal vs masked), before any model runs
        (:func:`~mlflow_mia.signals.dispatch.check_model_kinds`).
    """
    if reference is not None:
        check_model_kinds(target, [reference])
    config = config or CanaryAuditConfig()
    cache, text_key = _canary_cache(cache, hash_key)
    run = {"cache": cache, "device": device, "progress": progress, "text_key": text_key}
    signal = score_texts(target, canaries.texts, config, desc="canaries target", **run)
    models = {"target": {"identity": target.model_id, "name": target.name}}
    ref = None
    if reference is not None:
        ref = score_texts(reference, canaries.texts, config, desc="canaries reference", **run)
        models["reference"] = {"identity": reference.model_id, "name": reference.name,
                               "weights": reference.weights_id}
    tids = np.array(canaries.template_ids)
    candidates = {}
    for i, template in enumerate(t for t in canaries.templates if t.is_secret_format):
        if not ((tids == template.id) & canaries.is_secret_format).any():
            continue
        secrets, exact = candidate_secrets(template, config.n_candidates, seed=config.seed + 1 + i)
        candidates[template.id] = (score_texts(target, [template.render(s) for s in secrets], config,
                                               desc=f"candidates {template.id}", **run), exact)
    return CanarySignals(target=signal, reference=ref, candidates=candidates, models=models)
