"""Stage 2 of the NER prompt memorization audit (Xia et al. 2025): entity confidences -> M-MEM.

:func:`~mlflow_mia.audits.ner.run.ner_audit` (:mod:`.run`) chains the layers for one token-classification model: every
prompt of every entity type is filled with every name of the detection set
(plus the name alone and the hand-written baseline prompts), the entity
confidences are computed in one batched, cached run (:mod:`~mlflow_mia.signals.entity_confidence`),
and the prompt metrics (:mod:`~mlflow_mia.metrics.prompts`) are taken per type:
best / worst prompt chosen on dev and reported on test, gap and standard
deviation, baselines -PT / One-PT / Mix-PT, the ensembles, token removal and TPR
at a low FPR. It runs in two stages: :func:`~mlflow_mia.audits.ner.signals.ner_signals` (every
forward pass, the token-removal search included) and :func:`score_ner` (no model). :func:`compare_models` gives Kendall's tau of prompt scores across
models and the control-corrected mean of two models trained on swapped halves.

With a ``reference`` tagger (a model trained on similar data without the audited
names; in the WNUT demo, the tagger of the other half: the *control*), every
sentence is also scored by the reference, and a per-name ratio score, the mean over
prompts of ``log C(e; target) - log C(e; reference)``
(:func:`~mlflow_mia.metrics.prompts.ratio_scores`), is reported per type next to the
target's own M-MEM (``ner/{type}/ratio_*``), with intervals that resample names.

References
----------
.. [1] Y. Xia et al., "Exploring prompts to elicit memorization in masked language
   model-based named entity recognition", PLoS One 20(9), 2025.
.. [2] F. Mireshghallah et al., "Quantifying privacy risks of masked language models
   using membership inference attacks", EMNLP 2022, Sect. 3 (likelihood ratio).
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass, field
import itertools

import numpy as np
import pandas as pd

from mlflow_mia.audits.ner.names import name_hash
from mlflow_mia.audits.ner.signals import NerSignals
from mlflow_mia.config import NerAuditConfig
from mlflow_mia.metrics import prompts as pm
from mlflow_mia.hashing import HashKey, require_hash_key
from mlflow_mia.metrics.permutation import prompt_spread_null

_METRIC_UNSAFE = re.compile(r"[^\w.\- ]")  # characters MLflow rejects in metric names

__all__ = ["NerAuditResult", "score_ner", "compare_models"]

log = logging.getLogger(__name__)


@dataclass
class NerAuditResult:
    """What :func:`ner_audit` found for one model.

    Attributes
    ----------
    model_id : str
    metrics : dict of str to float
        ``ner/{type}/{metric}`` (see :func:`ner_audit`).
    prompts_table : pandas.DataFrame
        One row per prompt and type: ``prompt_id, prompt, entity_type, sentence_type,
        slot_position, n_words, mmem_dev, mmem_test, mmem_all``.
    summaries : dict of str to dict
        Per type: best / worst / modified prompts (text), baselines, ensembles, tau.
    names : pandas.DataFrame
        ``name_hash, entity_type, is_member, split`` (no raw names) plus the best
        and worst prompts' confidences (``c_best``, ``c_worst``).
    raw_names : list of str
        Raw names in the order of ``names``; written only when ``log_texts`` is set.
    config : NerAuditConfig
    hash_key : HashKey or None
        The key of the ``name_hash`` column (never logged); the logger digests the
        names with it.
    warnings : list of str
        What may distort the result (e.g. names read at ``[UNK]`` tokens); shown in the report.
    reference_id : str or None
        Model id of the reference tagger of the ratio scores (None: no reference given).
    reference_weights : str or None
        Its weights digest (``sha256:<hex>``), which a gate record keeps.
    """

    model_id: str
    metrics: dict
    prompts_table: object
    summaries: dict
    names: object
    raw_names: list = field(repr=False, default_factory=list)
    config: NerAuditConfig = field(default_factory=NerAuditConfig)
    hash_key: object = field(repr=False, default=None)
    warnings: list = field(default_factory=list)
    reference_id: str | None = None
    reference_weights: str | None = None

    @property
    def entity_types(self) -> list[str]:
        return list(self.summaries)


def _type_metrics(y, split, conf, table, base, removal, cfg) -> tuple[dict, dict, dict]:
    """Metrics, summary and ROC scores of one entity type."""
    dev, test = split == "dev", split == "test"
    m_dev, m_test, m_all = (pm.prompt_mmem(y[s], conf[:, s]) for s in (dev, test, slice(None)))
    table["mmem_dev"], table["mmem_test"], table["mmem_all"] = m_dev, m_test, m_all
    best, worst = int(np.argmax(m_dev)), int(np.argmin(m_dev))
    out = {"best_prompt_mmem": m_test[best], "best_prompt_mmem_dev": m_dev[best],
           "worst_prompt_mmem": m_test[worst], "worst_prompt_mmem_dev": m_dev[worst]}
    for tag, idx in (("best", best), ("worst", worst)):
        for part, rows in (("", test), ("_dev", dev)):
            low, high = pm.mmem_ci(y[rows], conf[idx, rows], rounds=cfg.bootstrap_rounds, seed=cfg.seed)
            out[f"{tag}_prompt_mmem{part}_ci_low"], out[f"{tag}_prompt_mmem{part}_ci_high"] = low, high
    for suffix, prompt_scores in (("", m_dev), ("_test", m_test), ("_all", m_all)):
        spread = pm.prompt_spread(prompt_scores)
        out[f"prompt_gap{suffix}"], out[f"prompt_std{suffix}"], out[f"prompt_mean{suffix}"] = (
            spread["gap"], spread["std"], spread["mean"])
    out.update(_spread_null(y[dev], conf[:, dev], cfg))
    out["kendall_tau_dev_test"], out["kendall_tau_dev_test_pvalue"] = pm.kendall_tau(m_dev, m_test)
    out["kendall_tau_length"], _ = pm.kendall_tau(table["n_words"], m_all)  # Sect. 5.4: prompt length
    for column in ("sentence_type", "slot_position"):  # Sect. 5.4: sentence type, position of the name
        for value, mean in table.groupby(column)["mmem_all"].mean().items():
            out[f"mmem_by_{column}/" + _METRIC_UNSAFE.sub("_", str(value))] = mean
    # baselines: the name alone, one hand-written prompt, a random hand-written prompt per name
    out["no_pt_mmem"] = pm.mmem(y[test], base["none"][test])
    out["one_pt_mmem"] = pm.mmem(y[test], base["hand"][0, test])
    pick = np.random.default_rng(cfg.seed).integers(0, base["hand"].shape[0], size=len(y))
    mix = base["hand"][pick, np.arange(len(y))]
    out["mix_pt_mmem"] = pm.mmem(y[test], mix[test])
    ens_test = pm.ensemble_mmem(y[test], conf[:, test], weights=m_dev)
    ens_dev = pm.ensemble_mmem(y[dev], conf[:, dev], weights=m_dev)
    out.update({f"{k}_mmem": v for k, v in ens_test.items()})
    out.update({f"{k}_mmem_dev": v for k, v in ens_dev.items()})
    scores = pm.ensemble_scores(conf, weights=m_dev)
    best_ens = max(scores, key=lambda k: ens_dev[k])
    summary = {"best_prompt": table["prompt"].iloc[best], "worst_prompt": table["prompt"].iloc[worst],
               "best_prompt_id": table["prompt_id"].iloc[best], "worst_prompt_id": table["prompt_id"].iloc[worst],
               "one_pt_prompt": base["hand_prompts"][0], "best_ensemble": best_ens}
    for alpha in cfg.fprs:
        for tag, s in (("best_prompt", conf[best]), ("best_ensemble", scores[best_ens])):
            r = pm.tpr_at_dev_fpr(y[dev], s[dev], y[test], s[test], alpha=alpha)
            out[f"{tag}_tpr_at_fpr_{alpha:g}"] = r["tpr"]
            out[f"{tag}_fpr_at_fpr_{alpha:g}"] = r["fpr"]
    if removal:  # BM-PT / WM-PT: found in stage 1 (the search runs the model), scored here
        summary["best_modified_prompt"], summary["worst_modified_prompt"] = removal["best"], removal["worst"]
        out.update({"best_modified_mmem": pm.mmem(y[test], removal["test_conf"][0]),
                    "best_modified_mmem_dev": removal["best_dev"],
                    "worst_modified_mmem": pm.mmem(y[test], removal["test_conf"][1]),
                    "worst_modified_mmem_dev": removal["worst_dev"]})
    out["n_prompts"], out["n_names_dev"], out["n_names_test"] = len(table), int(dev.sum()), int(test.sum())
    rocs = {"best": (y[test], conf[best, test]), "worst": (y[test], conf[worst, test])}
    return out, summary, rocs


def _ratio_metrics(y, split, conf, ref, none_target, none_reference, cfg) -> tuple[dict, np.ndarray, int]:
    """Metrics of the per-name ratio score of one type (the reference tagger as a per-name reference).

    ``conf`` and ``ref`` are the ``(n_prompts, n_names)`` confidences of the prompt set
    under the target and the reference; ``none_*`` those of the name alone. Returns the
    metrics (``ratio_avg_*``: the mean log ratio over prompts; ``ratio_best_prompt_*``:
    the prompt whose log ratio ranks the dev names best, scored on test; ``ratio_no_pt_*``:
    the name alone), the ``(n_names,)`` ratio score and the index of that prompt.
    Intervals resample names (the unit), stratified by label.
    """
    dev, test = split == "dev", split == "test"
    ratios = pm.confidence_log_ratio(conf, ref)
    score = ratios.mean(axis=0)
    per_prompt_dev = pm.prompt_mmem(y[dev], ratios[:, dev])
    best = int(np.argmax(per_prompt_dev))
    out = {"ratio_avg_mmem": pm.mmem(y[test], score[test]), "ratio_avg_mmem_dev": pm.mmem(y[dev], score[dev]),
           "ratio_avg_mmem_all": pm.mmem(y, score), "ratio_best_prompt_mmem": pm.mmem(y[test], ratios[best, test]),
           "ratio_best_prompt_mmem_dev": per_prompt_dev[best],
           "ratio_no_pt_mmem": pm.mmem(y[test], pm.confidence_log_ratio(none_target, none_reference)[test])}
    for tag, values in (("ratio_avg", score), ("ratio_best_prompt", ratios[best])):
        for part, rows in (("", test), ("_dev", dev)):
            low, high = pm.mmem_ci(y[rows], values[rows], rounds=cfg.bootstrap_rounds, seed=cfg.seed)
            out[f"{tag}_mmem{part}_ci_low"], out[f"{tag}_mmem{part}_ci_high"] = low, high
    for alpha in cfg.fprs:
        r = pm.tpr_at_dev_fpr(y[dev], score[dev], y[test], score[test], alpha=alpha)
        out[f"ratio_avg_tpr_at_fpr_{alpha:g}"], out[f"ratio_avg_fpr_at_fpr_{alpha:g}"] = r["tpr"], r["fpr"]
    return out, score, best
def _spread_null(y, conf, cfg) -> dict:
    """Dev gap and sigma against chance: the label-permutation null's 95th percentile and p-value."""
    if conf.shape[0] < 2 or y.min() == y.max():
        return {}
    null = prompt_spread_null(y, conf, seed=cfg.seed)
    return {"prompt_gap_null_q95": null.gap_null_quantile, "prompt_gap_null_pvalue": null.gap_pvalue,
            "prompt_std_null_q95": null.std_null_quantile, "prompt_std_null_pvalue": null.std_pvalue}


def score_ner(signals: NerSignals, *, config: NerAuditConfig | None = None, hash_key: HashKey) -> NerAuditResult:
    """Stage 2 of :func:`ner_audit`: entity confidences -> M-MEM and the other metrics; runs no model.

    Parameters
    ----------
    signals : NerSignals
        From :func:`~mlflow_mia.audits.ner.signals.ner_signals` with the same ``config``.
    config : NerAuditConfig, optional
    hash_key : HashKey
        Key of the name hashes (``name_hash``), as :func:`ner_audit`.

    Raises
    ------
    TypeError
        ``hash_key`` is not a :class:`~mlflow_mia.hashing.HashKey`.

    Returns
    -------
    NerAuditResult
        As :func:`ner_audit`.
    """
    cfg = config or NerAuditConfig()
    key = require_hash_key(hash_key, "score_ner")
    table, prompt_set, hand = signals.table, signals.prompt_set, signals.handwritten
    metrics, summaries, tables, name_rows, raw, rocs = {}, {}, [], [], [], {}
    for kind in signals.entity_types:
        g = table[table["entity_type"] == kind].reset_index(drop=True)
        type_names, conf = list(g["name"]), signals.confidences[kind]
        rconf = signals.reference_confidences.get(kind)
        n_set = int((prompt_set.entity_type == kind).sum())
        hand_prompts = list(hand.loc[hand.entity_type == kind, "prompt"])
        base = {"none": conf[n_set], "hand": conf[n_set + 1:], "hand_prompts": hand_prompts}
        t = prompt_set[prompt_set.entity_type == kind].reset_index(drop=True).copy()
        y, split = g["is_member"].to_numpy(), g["split"].to_numpy()
        out, summaries[kind], rocs[kind] = _type_metrics(y, split, conf[:n_set], t, base,
                                                         signals.token_removal.get(kind), cfg)
        extra = {}
        if rconf is not None:
            ratio, extra["ratio_avg"], best_ratio = _ratio_metrics(y, split, conf[:n_set], rconf[:n_set],
                                                                   conf[n_set], rconf[n_set], cfg)
            out.update(ratio)
            summaries[kind]["ratio_best_prompt"] = t["prompt"].iloc[best_ratio]
            test = split == "test"
            rocs[kind]["avg_c"] = (y[test], conf[:n_set].mean(axis=0)[test])
            rocs[kind]["ratio"] = (y[test], extra["ratio_avg"][test])
        metrics.update({f"ner/{kind}/{k}": float(v) for k, v in out.items()})
        tables.append(t)
        best, worst = (t.index[t.prompt_id == summaries[kind]["best_prompt_id"]][0],
                       t.index[t.prompt_id == summaries[kind]["worst_prompt_id"]][0])
        name_rows.append(pd.DataFrame({"name_hash": [name_hash(n, key) for n in type_names], "entity_type": kind,
                                       "is_member": y, "split": split, "c_best": conf[best],
                                       "c_worst": conf[worst], "c_no_prompt": base["none"], **extra}))
        raw.extend(type_names)
    summaries = {k: {**v, "rocs": rocs[k]} for k, v in summaries.items()}
    return NerAuditResult(model_id=signals.model_id, metrics=metrics,
                          prompts_table=pd.concat(tables, ignore_index=True), summaries=summaries,
                          names=pd.concat(name_rows, ignore_index=True), raw_names=raw, config=cfg, hash_key=key,
                          warnings=list(signals.warnings), reference_id=signals.reference_id,
                          reference_weights=signals.reference_weights)


def compare_models(results: dict, *, controls: dict | None = None) -> tuple[dict, object]:
    """Kendall's tau of prompt scores across models, and control-corrected means.

    Parameters
    ----------
    results : dict of str to NerAuditResult
        Model label -> result (the same prompts per type).
    controls : dict of str to str, optional
        ``label -> label of its control`` (e.g. ``{"A": "B"}``): two models trained on
        swapped halves whose in- and out-of-sample names are swapped. Their mean
        best-prompt M-MEM (and mean AVG-C) is reported as ``ner/{type}/controlled/...``:
        a name set that is merely easier to tag lifts one model and lowers the other.

    Returns
    -------
    (dict of metrics, pandas.DataFrame of tau per type and model pair)
    """
    rows, metrics = [], {}
    labels = list(results)
    for a, b in itertools.combinations(labels, 2):
        ta, tb = results[a].prompts_table, results[b].prompts_table
        for kind in sorted(set(ta.entity_type) & set(tb.entity_type)):
            x = ta[ta.entity_type == kind].set_index("prompt_id")
            z = tb[tb.entity_type == kind].set_index("prompt_id").reindex(x.index)
            for col in ("mmem_dev", "mmem_test", "mmem_all"):
                tau, p = pm.kendall_tau(x[col], z[col])
                rows.append({"model_a": a, "model_b": b, "entity_type": kind, "scores": col, "tau": tau, "pvalue": p})
    for a, b in (controls or {}).items():
        if a not in results or b not in results or a > b:
            continue
        for kind in results[a].entity_types:
            for key in ("best_prompt_mmem", "worst_prompt_mmem", "prompt_gap", "prompt_std", "avg_c_mmem",
                        "prompt_mean_all"):
                va = results[a].metrics.get(f"ner/{kind}/{key}", math.nan)
                vb = results[b].metrics.get(f"ner/{kind}/{key}", math.nan)
                metrics[f"ner/{kind}/controlled/{key}"] = (va + vb) / 2.0
    return metrics, pd.DataFrame(rows)
