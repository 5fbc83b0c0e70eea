"""Stage 1 of the NER prompt audit: every forward pass of the taggers, nothing else -> :class:`NerSignals`.

The entity confidence C(e) (:mod:`mlflow_mia.signals.entity_confidence`) of every
(prompt, name) pair of each entity type (the prompt set, the name alone, the
hand-written prompts) under the target and, with one, the reference tagger; and the
token-removal search (Xia et al. 2025, BM-PT / WM-PT), which asks the model at every
step. Stage 2 (:func:`mlflow_mia.audits.ner.scoring.score_ner`) reads them and runs no model.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from mlflow_mia.audits.ner.names import assign_split, check_names_table, unknown_token_warnings
from mlflow_mia.audits.ner.prompts import SLOT, load_prompts
from mlflow_mia.config import NerAuditConfig
from mlflow_mia.metrics import prompts as pm
from mlflow_mia.signals.entity_confidence import entity_confidence, TokenClassifier, entity_tag_ids

__all__ = ["ner_signals"]

log = logging.getLogger(__name__)


class _Scorer:
    """C(e) of (prompt, name) pairs of one type through the cached signal."""

    def __init__(self, clf, *, subword, token_budget, batch_size, device, cache, progress):
        self.clf = clf
        self.kw = dict(subword=subword, token_budget=token_budget, batch_size=batch_size, device=device, cache=cache)
        self.progress = progress

    def matrix(self, prompts, names, entity_type, desc=None) -> np.ndarray:
        """``(len(prompts), len(names))`` confidences."""
        p = [q for q in prompts for _ in names]
        n = list(names) * len(prompts)
        values = entity_confidence(self.clf, p, n, [entity_type] * len(p), progress=self.progress, desc=desc,
                                   **self.kw)
        return values.reshape(len(prompts), len(names))

    def many(self, jobs) -> list[np.ndarray]:
        """Every ``(prompts, names, type)`` job in one length-sorted run; one matrix per job."""
        p, n, t = [], [], []
        for prompts, names, kind in jobs:
            for q in prompts:
                p.extend([q] * len(names))
                n.extend(names)
                t.extend([kind] * len(names))
        values = entity_confidence(self.clf, p, n, t, progress=self.progress, **self.kw)
        out, start = [], 0
        for prompts, names, _ in jobs:
            size = len(prompts) * len(names)
            out.append(values[start:start + size].reshape(len(prompts), len(names)))
            start += size
        return out


@dataclass
class NerSignals:
    """What the NER audit reads from the taggers (stage 1).

    Attributes
    ----------
    table : pandas.DataFrame
        The checked names table with its ``split`` (dev/test).
    entity_types : list of str
    prompt_set, handwritten : pandas.DataFrame
        The prompt set and the hand-written baseline prompts (``prompt, entity_type, ...``).
    confidences : dict of str to ndarray
        By type: ``(n_set + 1 + n_hand, n_names)`` C(e) under the target; rows are the type's prompts of
        the set, the name alone (``SLOT``), then the hand-written prompts; columns the type's names in
        table order.
    reference_confidences : dict of str to ndarray
        The same under the reference tagger (empty without one).
    token_removal : dict of str to dict
        By type (empty when ``config.token_removal`` is off or no step was found): ``best``, ``worst``
        (the modified prompts), ``best_dev``, ``worst_dev`` (their dev M-MEM) and ``test_conf``
        (``(2, n_test)`` C(e) of the two on the test names).
    model_id : str
    reference_id : str or None
    reference_weights : str or None
        The reference tagger's weights digest (``sha256:<hex>``; None without one): a gate record names it.
    warnings : list of str
    """

    table: pd.DataFrame
    entity_types: list
    prompt_set: pd.DataFrame
    handwritten: pd.DataFrame
    confidences: dict
    reference_confidences: dict = field(default_factory=dict)
    token_removal: dict = field(default_factory=dict)
    model_id: str = ""
    reference_id: str | None = None
    reference_weights: str | None = None
    warnings: list = field(default_factory=list)


def _token_removal(kind, y, split, conf, prompts, scorer, names) -> dict:
    """BM-PT / WM-PT: greedy token removal from the dev-best and dev-worst prompts, each step scored on dev."""
    dev, test = split == "dev", split == "test"
    m_dev = pm.prompt_mmem(y[dev], conf[:, dev])
    best, worst = int(np.argmax(m_dev)), int(np.argmin(m_dev))  # as stage 2 chooses them
    dev_names = [n for n, d in zip(names, dev) if d]

    def dev_score(candidates):
        return pm.prompt_mmem(y[dev], scorer.matrix(candidates, dev_names, kind))

    steps = (pm.greedy_token_removal(prompts[best], dev_score, maximize=True)
             + pm.greedy_token_removal(prompts[worst], dev_score, maximize=False))
    if not steps:
        return {}
    bm = max(steps, key=lambda s: s.score)
    wm = min(steps, key=lambda s: s.score)
    test_names = [n for n, t in zip(names, test) if t]
    return {"best": bm.prompt, "worst": wm.prompt, "best_dev": bm.score, "worst_dev": wm.score,
            "test_conf": scorer.matrix([bm.prompt, wm.prompt], test_names, kind)}


def ner_signals(model, names, *, prompts=None, handwritten=None, config: NerAuditConfig | None = None, cache=None,
                device=None, progress: bool = True, reference=None) -> NerSignals:
    """Stage 1 of :func:`~mlflow_mia.audits.ner.run.ner_audit`: check the inputs, then run the taggers.

    Parameters are those of :func:`~mlflow_mia.audits.ner.run.ner_audit`.

    Returns
    -------
    NerSignals

    Raises
    ------
    ValueError
        Bad names table (one class, unknown types, empty names), prompts without
        exactly one slot or missing for a type, a type a tagger has no tag for
        (all before any forward pass).
    """
    cfg = config or NerAuditConfig()
    clf = model if isinstance(model, TokenClassifier) else TokenClassifier(*model)
    table = assign_split(check_names_table(names, entity_types=cfg.entity_types), dev_fraction=cfg.dev_fraction,
                         seed=cfg.seed)
    types = list(cfg.entity_types or dict.fromkeys(table["entity_type"]))
    warnings = unknown_token_warnings(table, clf.tokenizer)
    for warning in warnings:
        log.warning(warning)
    ref = None if reference is None else (reference if isinstance(reference, TokenClassifier)
                                          else TokenClassifier(*reference))
    for warning in [] if ref is None else unknown_token_warnings(table, ref.tokenizer):
        warnings.append(f"reference tagger: {warning}")
        log.warning(warnings[-1])
    for kind in types:  # fail before any forward pass
        for tagger in (clf, ref) if ref is not None else (clf,):
            entity_tag_ids(tagger.label2id, kind)
    prompt_set = load_prompts(prompts, entity_types=types)
    hand = load_prompts(handwritten, entity_types=types, kind="handwritten")
    run = dict(subword=cfg.subword, token_budget=cfg.token_budget, batch_size=cfg.batch_size, device=device,
               cache=cache, progress=progress)
    scorer = _Scorer(clf, **run)
    groups = {k: table[table["entity_type"] == k].reset_index(drop=True) for k in types}
    jobs = [(list(prompt_set.loc[prompt_set.entity_type == k, "prompt"]) + [SLOT] +
             list(hand.loc[hand.entity_type == k, "prompt"]), list(g["name"]), k) for k, g in groups.items()]
    ref_confs = {} if ref is None else dict(zip(types, _Scorer(ref, **run).many(jobs)))
    confs = dict(zip(types, scorer.many(jobs)))
    removal = {}
    if cfg.token_removal:
        for (all_prompts, type_names, kind), g in zip(jobs, groups.values()):
            n_set = int((prompt_set.entity_type == kind).sum())
            found = _token_removal(kind, g["is_member"].to_numpy(), g["split"].to_numpy(), confs[kind][:n_set],
                                   all_prompts[:n_set], scorer, type_names)
            if found:
                removal[kind] = found
    return NerSignals(table=table, entity_types=types, prompt_set=prompt_set, handwritten=hand, confidences=confs,
                      reference_confidences=ref_confs, token_removal=removal,
                      model_id=clf.model_id if clf.model_id is not None else clf.weights_id,
                      reference_id=None if ref is None else ref.model_id,
                      reference_weights=None if ref is None else ref.weights_id, warnings=warnings)
