"""``ner_audit``: the NER prompt audit's two stages in a row (the taggers' confidences, then M-MEM)."""

from __future__ import annotations

from mlflow_mia.audits.ner.scoring import NerAuditResult, score_ner
from mlflow_mia.audits.ner.signals import ner_signals
from mlflow_mia.config import NerAuditConfig
from mlflow_mia.hashing import HashKey

__all__: list[str] = []


def ner_audit(model, names, *, prompts=None, handwritten=None, config: NerAuditConfig | None = None, cache=None,
              device=None, progress: bool = True, hash_key: HashKey, reference=None) -> NerAuditResult:
    """Audit one token-classification model for memorized entity names.

    Parameters
    ----------
    model : TokenClassifier or (model, tokenizer)
    names : pandas.DataFrame
        ``name, entity_type, is_member`` (1 = in the model's training data), optional
        ``split`` (dev/test; else drawn with ``config.seed`` and ``config.dev_fraction``).
    prompts, handwritten : DataFrame or path, optional
        Prompt set and hand-written baseline prompts (``prompt, entity_type,
        sentence_type``); default: the shipped sets.
    config : NerAuditConfig, optional
    cache : ConfidenceCache, optional
    device : str, optional
    progress : bool
    hash_key : HashKey
        Key of the name hashes (``name_hash``); required: the options parser resolves it once per audit
        (``hash_key_file``, else ``$MLFLOW_MIA_HASH_KEY``, else a random key that is not kept;
        :func:`~mlflow_mia.hashing.resolve_hash_key`).
    reference : TokenClassifier or (model, tokenizer), optional
        A reference tagger: trained on similar data without the audited names (e.g. the
        WNUT demo's other tagger, whose in-sample names are this model's out-of-sample
        ones). Its tags must cover the audited types; its tokenizer may differ.

    Returns
    -------
    NerAuditResult
        Metrics per type ``ner/{type}/...``: ``best_prompt_mmem`` / ``worst_prompt_mmem``
        (chosen on dev, M-MEM on test; ``_dev``, ``_ci_low/_ci_high`` and ``_dev_ci_low/_dev_ci_high`` too),
        ``prompt_gap`` / ``prompt_std`` (over prompts on dev; ``_test``, ``_all``),
        ``no_pt_mmem``, ``one_pt_mmem``, ``mix_pt_mmem``, ``{mv,avg_c,wed_c,max_c,min_c}_mmem``,
        ``best_modified_mmem`` / ``worst_modified_mmem``, ``kendall_tau_dev_test``,
        ``kendall_tau_length`` (prompt words vs M-MEM over all names),
        ``mmem_by_sentence_type/{type}`` and ``mmem_by_slot_position/{pos}`` (mean M-MEM over all names),
        ``{best_prompt,best_ensemble}_tpr_at_fpr_{alpha}``. With a ``reference``, also
        ``ratio_avg_mmem`` (AUC of the per-name mean over prompts of ``log C(e; target) -
        log C(e; reference)``, on test; ``_dev``, ``_all``, ``_ci_low/_ci_high``,
        ``_dev_ci_low/_dev_ci_high``), ``ratio_best_prompt_mmem`` (the prompt whose log
        ratio is best on dev, on test; same suffixes), ``ratio_no_pt_mmem`` and
        ``ratio_avg_tpr_at_fpr_{alpha}``; intervals resample names, stratified by label.

    Raises
    ------
    ValueError
        Bad names table (one class, unknown types, empty names), prompts without
        exactly one slot or missing for a type, a type the model has no tag for.
    """
    signals = ner_signals(model, names, prompts=prompts, handwritten=handwritten, config=config, cache=cache,
                          device=device, progress=progress, reference=reference)
    return score_ner(signals, config=config, hash_key=hash_key)
