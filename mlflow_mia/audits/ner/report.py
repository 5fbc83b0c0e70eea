"""The ``report.md`` section of a NER prompt memorization audit.

Numbers and prompts only: names never appear (they are the sensitive data here).
"""

from __future__ import annotations

import math

__all__ = ["render_ner_report"]


def _n(x, digits: int = 3) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def _row(m: dict, kind: str) -> list[str]:
    g = lambda k: m.get(f"ner/{kind}/{k}", math.nan)  # noqa: E731
    ci = f"[{_n(g('best_prompt_mmem_ci_low'), 2)}, {_n(g('best_prompt_mmem_ci_high'), 2)}]"
    return [kind, f"{int(g('n_names_dev'))}/{int(g('n_names_test'))}", f"{_n(g('best_prompt_mmem_dev'))}",
            f"{_n(g('best_prompt_mmem'))} {ci}", _n(g("worst_prompt_mmem_dev")), _n(g("worst_prompt_mmem")),
            _n(100 * g("prompt_gap"), 1), _n(100 * g("prompt_gap_null_q95"), 1), _n(100 * g("prompt_std"), 2),
            _n(100 * g("prompt_std_null_q95"), 2), _n(g("no_pt_mmem")), _n(g("one_pt_mmem")),
            _n(g("mix_pt_mmem")), _n(g("avg_c_mmem")), _n(g("best_modified_mmem")), _n(g("worst_modified_mmem"))]


def _ratio_lines(result) -> list[str]:
    """The ratio-score table (target against the reference tagger); nothing without a reference."""
    reference = getattr(result, "reference_id", None)
    if not reference:
        return []
    m = result.metrics

    def ci(kind, key):
        g = lambda k: m.get(f"ner/{kind}/{k}", math.nan)  # noqa: E731
        return f"{_n(g(key))} [{_n(g(key + '_ci_low'), 2)}, {_n(g(key + '_ci_high'), 2)}]"

    rows = [[kind, ci(kind, "best_prompt_mmem"), _n(m.get(f"ner/{kind}/avg_c_mmem", math.nan)),
             ci(kind, "ratio_avg_mmem"), ci(kind, "ratio_best_prompt_mmem"),
             _n(m.get(f"ner/{kind}/ratio_no_pt_mmem", math.nan))] for kind in result.entity_types]
    header = ["type", "target best prompt [95% CI]", "target AVG-C", "ratio, mean over prompts [95% CI]",
              "ratio, best prompt [95% CI]", "ratio -PT"]
    return [f"Against the reference tagger `{reference}`: the ratio score of a name is the mean over prompts of "
            "log C(e; target) - log C(e; reference) (the likelihood-ratio idea of Mireshghallah et al. 2022 on "
            "the entity confidence of Xia et al. 2025), so a name that any tagger of the domain finds easy does "
            "not count as memorized. AUC on the test names; intervals resample names (the unit), stratified by "
            "label; the best ratio prompt is chosen on dev.", ""] + _table(header, rows) + [""]


def _gate_lines(gate) -> list[str]:
    """The release gate's section: its rule, message and one row per type and budget; nothing without a gate."""
    if gate is None:
        return []
    level = f"{gate.confidence:.0%}"
    rows = [[p["metric"], f"{c['alpha']:g}:{c['max_tpr']:g}", f"{p['n_members']}/{p['n_non_members']}",
             _n(p["value"]), _n(p["lower"]), _n(p["upper"]), p["status"]] for c in gate.checks for p in c["points"]]
    header = ["score (type)", "budget", "member/non-member names", "TPR", f"{level} lower", f"{level} upper",
              "status"]
    return [f"**Release gate: {gate.status.upper()}**: {gate.message()}.", "",
            "The gate bounds, per entity type, the TPR at FPR alpha of member names against non-member names "
            "(the unit is the name): with a reference tagger on the ratio score over every name, else on the "
            "best prompt's confidence over the test names (the prompt is chosen on dev). Clopper-Pearson bounds "
            "that include the threshold's noise: pass when every upper bound is within the budget, fail when a "
            "lower bound exceeds it, inconclusive otherwise.", ""] + _table(header, rows) + [""]


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |"
                                                                           for r in rows]


def _exposure(log_samples: bool | None) -> list[str]:
    """What ``tables/ner_names.csv`` exposes (issue 21, High 1); nothing when not logged."""
    if log_samples is None:
        return []
    if log_samples:
        return ["**This run logged per-name confidences** (`log_samples`): `tables/ner_names.csv` holds each name's "
                "confidence under the best, the worst and no prompt beside its label. With the logged prompts and "
                "the model, anyone who can read this run can recompute a candidate name's confidence, find its row "
                "and read whether it was in the training data: give this run no wider read access than the "
                "training data.", ""]
    return ["`tables/ner_names.csv` lists keyed name hashes, types, labels and splits only: a confidence beside a "
            "label could be recomputed from the model and the logged prompts to find a candidate name's label. "
            "`log_samples` (`--log-samples`) logs the confidences.", ""]


def render_ner_report(result, *, title: str | None = None, artifacts=None, level: int = 2,
                      log_samples: bool | None = None, verdict=None, gate=None) -> str:
    """Markdown section for one :class:`~mlflow_mia.audits.ner.scoring.NerAuditResult`.

    Parameters
    ----------
    result : NerAuditResult
    title : str, optional
    artifacts : iterable of str, optional
        Logged artifact paths, listed at the end.
    level : int
        Markdown heading level of the section.
    log_samples : bool, optional
        Whether the run's names table holds per-name confidences; adds a paragraph
        saying what it exposes (none when None).
    verdict : Verdict, optional
        The audit's verdict (:func:`mlflow_mia.tracking.verdict.ner_verdict`), shown first
        under the title as in every report.
    gate : GateResult, optional
        The NER release gate's verdict (:mod:`mlflow_mia.metrics.ner_gate`): its section follows the verdict.

    Returns
    -------
    str
    """
    h = "#" * level
    m = result.metrics
    lines = [f"{h} {title or f'NER prompt memorization audit of {result.model_id}'}", ""]
    if verdict is not None:
        lines += [verdict.markdown(), ""]
    lines += _gate_lines(gate)
    lines += [f"Model `{result.model_id}`; entity confidence C(e) read at the "
             f"{'first subword of each word' if result.config.subword == 'first' else 'mean over all subwords'}"
             " of the name (Xia et al. 2025). M-MEM is the AUC of in-sample vs out-of-sample names (0.5 = no "
             "memorization detected). Best and worst prompts are chosen on dev and scored on test; gap and "
             "sigma (percentage points) are over all prompts on dev. Beside each, the 95th percentile of its "
             "label-permutation null (in/out labels shuffled within the dev names, 1,000 times): a gap below it is "
             "what chance alone gives with this many names.", ""]
    header = ["type", "names dev/test", "best dev", "best test [95% CI]", "worst dev", "worst test", "gap (pp)",
              "gap null 95% (pp)", "sigma (pp)", "sigma null 95% (pp)", "-PT", "One-PT", "Mix-PT", "AVG-C", "BM-PT", "WM-PT"]
    lines += _table(header, [_row(m, k) for k in result.entity_types]) + [""]
    lines += _ratio_lines(result)
    for kind in result.entity_types:
        s = result.summaries[kind]
        lines.append(f"**{kind}**: best prompt `{s['best_prompt']}`, worst `{s['worst_prompt']}`"
                     + (f"; best-modified `{s['best_modified_prompt']}`, worst-modified `{s['worst_modified_prompt']}`"
                        if "best_modified_prompt" in s else "")
                     + f". Best ensemble on dev: {s['best_ensemble']}. "
                       f"Kendall's tau of prompt M-MEM dev vs test: {_n(m.get(f'ner/{kind}/kendall_tau_dev_test'))}.")
        tprs = [f"TPR {_n(m[k])} at FPR {k.rsplit('_', 1)[-1]}" for k in m
                if k.startswith(f"ner/{kind}/best_prompt_tpr_at_fpr_")]
        if tprs:
            lines.append(f"  Best prompt on test, threshold from dev out-of-sample names: {'; '.join(tprs)} "
                         "(n/a: too few dev out-of-sample names to resolve the FPR).")
        lines.append("")
    warnings = list(getattr(result, "warnings", []))
    if warnings:
        lines += ["Warnings:", "", *[f"- {w}" for w in warnings], ""]
    lines += _exposure(log_samples)
    if artifacts:
        lines += ["Artifacts: " + ", ".join(f"`{a}`" for a in sorted(artifacts)), ""]
    return "\n".join(lines)
