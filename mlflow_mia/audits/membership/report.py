"""A short Markdown report of an audit, for a reviewer reading the MLflow UI.

:func:`render_report` turns an :class:`~mlflow_mia.audits.membership.AuditResult` into
Markdown: what was audited, the headline numbers per attack at sample and user
level with confidence intervals, what they mean in plain words, the release gate
verdict and the warnings. It contains no raw text, only counts and metrics.
"""

from __future__ import annotations

import math

from mlflow_mia.naming import fmt_alpha as _alpha
from mlflow_mia.naming import fmt_number, is_nan

__all__ = ["render_report", "render_comparison", "in_brief"]

_GLOSSARY = (
    "- **AUC**: the chance that a random member gets a higher attack score than a random non-member. "
    "0.5 means the attack cannot tell them apart; 1.0 means it separates them perfectly.\n"
    "- **TPR @ FPR a**: the share of members the attack recognises while wrongly flagging only a fraction a "
    "of the non-members, read off the ROC curve of the audited pool. The low-FPR columns matter most: an "
    "attacker who is confident about a few records is a real risk even when the AUC is modest.\n"
    "- **Precision / recall @ population FPR a**: the threshold is set on the population set alone, as an "
    "attacker without the member list would set it (the score exceeded by a fraction a of population texts). "
    "Precision is the share of flagged pool records that really are members; recall is the share of members "
    "flagged; the achieved FPR is measured on the pool's non-members.\n"
    "- **User level**: each user's score is the mean of their samples' scores; a user is a member when their "
    "samples were in the training data."
)


def _num(x, digits: int = 3) -> str:
    return fmt_number(x, digits)


def _pct(x) -> str:
    if is_nan(x):
        return "n/a"
    pct = 100 * x
    return f"{pct:.0f}%" if abs(pct - round(pct)) < 0.05 or pct >= 10 else f"{pct:.1f}%"


def _ci(ci) -> str:
    if not ci or all(is_nan(x) for x in ci):  # no bootstrap, or some resample left the rate undefined
        return ""
    lo, hi = ci
    return f" [{_num(lo)}, {_num(hi)}]"


def _roc_table(reports: dict, fprs) -> list[str]:
    head = "| Attack | AUC [CI] | " + " | ".join(f"TPR @ FPR {_alpha(a)}" for a in fprs) + " |"
    lines = [head, "|" + "---|" * (2 + len(fprs))]
    for name, rep in reports.items():
        cells = [f"`{name}`", _num(rep.roc.auc) + _ci(rep.ci.get("auc"))]
        cells += [_num(rep.tpr_at_fpr.get(a)) + _ci(rep.ci.get(f"tpr_at_fpr_{_alpha(a)}")) for a in fprs]
        lines.append("| " + " | ".join(cells) + " |")
    return lines + _unresolved_lines(reports, "tpr_at_fpr_", "Not resolved, shown as n/a: TPR @ FPR {a} ({why}).")


def _unresolved_lines(reports: dict, prefix: str, template: str) -> list[str]:
    """One line per rate this level cannot resolve (the same reason for every attack, so shown once)."""
    reasons: dict[str, str] = {}
    for rep in reports.values():
        for key, why in getattr(rep, "unresolved", {}).items():
            if key.startswith(prefix):
                reasons.setdefault(key[len(prefix):], why)
    return ["", *[template.format(a=a, why=why) for a, why in reasons.items()]] if reasons else []


def _population_table(reports: dict) -> list[str]:
    rows = [(name, t) for name, rep in reports.items() for t in rep.population]
    missing = [r.unresolved.get("population_thresholds") for r in reports.values() if getattr(r, "unresolved", None)]
    if not rows:
        why = next((m for m in missing if m), None)
        if why is None:
            why = "; ".join(dict.fromkeys(w for r in reports.values() for k, w in getattr(r, "unresolved", {}).items()
                                          if k.startswith("pop_fpr_"))) or "none was computed"
        return [f"_No population thresholds at this level: {why}._"]
    lines = ["| Attack | Population FPR | Precision [CI] | Recall [CI] | Achieved FPR on pool | Flagged |",
             "|---|---|---|---|---|---|"]
    for name, t in rows:
        ci, a = reports[name].ci, _alpha(t.alpha)
        precision = _num(t.precision) + _ci(ci.get(f"precision_at_pop_fpr_{a}"))
        recall = _num(t.tpr) + _ci(ci.get(f"recall_at_pop_fpr_{a}"))
        lines.append(f"| `{name}` | {a} | {precision} | {recall} | {_num(t.fpr)} | {t.n_flagged} |")
    return lines + _unresolved_lines(reports, "pop_fpr_", "No threshold at population FPR {a}: {why}.")


def _resampling(result, group_column: str | None) -> str:
    """The "Confidence intervals" cell: rounds, level and which unit the bootstrap resampled at each level."""
    mc = result.config.metrics
    if not mc.bootstrap_rounds:
        return "none (bootstrap_rounds=0)"
    parts = []
    for level, reports in (("sample", result.attacks), ("user", result.user_attacks)):
        rec = next((r.resampled for r in reports.values() if getattr(r, "resampled", None)), None)
        if rec is None:
            continue
        unit = {"sample": "samples", "user": "users",
                "group": f"groups{f' (`{group_column}`)' if group_column else ''}"}[rec["unit"]]
        parts.append(f"{unit} at {level} level ({rec['n_members']} member, {rec['n_non_members']} non-member)")
    how = f"; resampling {', '.join(parts)}, members and non-members apart" if parts else ""
    return f"{mc.bootstrap_rounds} bootstrap rounds, {mc.confidence:.0%}{how}"


def _strongest(reports: dict):
    def key(item):
        auc = item[1].roc.auc
        return -math.inf if is_nan(auc) else auc

    return max(reports.items(), key=key) if reports else (None, None)


def _summary_sentences(result) -> list[str]:
    name, rep = _strongest(result.attacks)
    if rep is None:
        return []
    metrics = result.metrics
    n_members = int(metrics.get("n_members", 0))
    out = []
    ci = rep.ci.get("auc")
    out.append(f"The strongest attack, `{name}`, tells members from non-members with AUC {_num(rep.roc.auc)}"
               + (f" (95% interval {_num(ci[0])} to {_num(ci[1])})" if ci else "") + "; 0.5 would mean no leakage.")
    resolved = [a for a, v in rep.tpr_at_fpr.items() if not is_nan(v)]
    alpha = min(resolved) if resolved else None
    if alpha is not None:
        tpr = rep.tpr_at_fpr[alpha]
        found = "" if is_nan(tpr) else f", about {round(tpr * n_members)} of the {n_members} members"
        out.append(f"Allowing {_pct(alpha)} false positives, it recognises {_pct(tpr)} of the training "
                   f"samples{found}.")
    defined = [t for t in rep.population if not is_nan(t.precision)]
    if defined:
        t = defined[-1]
        out.append(f"With a threshold set on population data alone (FPR {_alpha(t.alpha)}), {_pct(t.precision)} of "
                   f"the records it flags are members and it flags {_pct(t.tpr)} of all members.")
    elif rep.population:
        out.append("With thresholds set on population data alone, it flags no record of the pool.")
    user = result.user_attacks.get(name)
    if user is not None:
        out.append(f"Grouped by user, the same attack reaches AUC {_num(user.roc.auc)}.")
    if ci:
        if ci[0] > 0.5:
            out.append("The interval lies above 0.5: the model leaks membership of its training data.")
        elif ci[1] < 0.5:
            out.append("The interval lies below 0.5: non-members score as more likely members, which points to a "
                       "problem with the audit set-up (for example a reference model trained on the members, or "
                       "members and non-members from different sources) rather than to privacy.")
        else:
            out.append("The interval includes 0.5: this audit found no clear evidence of leakage at this sample "
                       "size, which is not a proof of privacy.")
    return out


def in_brief(result) -> str:
    """The report's "In brief" paragraph: the strongest attack's AUC and TPR in words, and what they mean.

    Also the run's and the audited registry version's description
    (:func:`mlflow_mia.tracking.verdict.run_description`). No raw text; '' when no attack ran.
    """
    return " ".join(_summary_sentences(result))


def _epsilon_lines(result) -> list[str]:
    """Empirical epsilon lower bounds (Jagielski et al. 2020) of every attack, at both levels, and their unit."""
    rows = [(name, level, rep) for level, reports in (("sample", result.attacks), ("user", result.user_attacks))
            for name, rep in reports.items() if getattr(rep, "epsilon", None) is not None]
    if not rows:
        return []
    mc = result.config.metrics
    eps = lambda x: "∞" if math.isinf(x) else _num(x, 2)  # noqa: E731
    lines = ["## Empirical epsilon lower bound", "",
             f"No training that is (eps, delta)-DP with eps below this value could have produced this attack "
             f"result, with {mc.confidence:.0%} confidence (delta = {mc.delta:g}). A small value is not a privacy "
             "guarantee; the point estimate uses the observed rates, without confidence (∞ when a threshold "
             "makes no error of one kind). The largest value the trial counts could certify, whatever the "
             "attack, is given beside it: a bound compared with an accountant's epsilon above that ceiling "
             "cannot exceed it, so the comparison says nothing.", "",
             "| Attack | Level | Epsilon lower bound | Point estimate | At population FPR | Trials (members, "
             "non-members) | Max certifiable |", "|---|---|---|---|---|---|---|"]
    for name, level, rep in rows:
        b = rep.epsilon
        at = "-" if math.isnan(b.alpha) else _alpha(b.alpha)
        lines.append(f"| `{name}` | {level} | {eps(b.epsilon)} | {eps(b.epsilon_point)} | {at} | "
                     f"{b.n_members}, {b.n_non_members} | {eps(b.max_certifiable)} |")
    lines += ["", *_epsilon_unit_sentences(result)]
    return lines + [""]


def _epsilon_unit_sentences(result) -> list[str]:
    """Which bound applies: the bound is on the epsilon of the unit whose inclusion was randomised."""
    grouped = bool(result.user_attacks)
    user_bound = any(getattr(r, "epsilon", None) is not None for r in result.user_attacks.values())
    if not grouped:
        return ["Each sample is one trial: the sample-level bound holds only if samples were included in training "
                "independently (for example canaries, or a per-sample random split). When membership was decided "
                "per user or document, give the group column: the bound then counts one trial per group."]
    out = ["Membership was decided per group, so a group is the unit whose inclusion was randomised. The "
           "sample-level bound treats the samples of a group as independent trials, which they are not: it bounds "
           "group-level epsilon at best and is shown for reference only."]
    out.append("The user-level bound counts one trial per group (its samples' mean score) and is the one that "
               "applies: a bound on group-level epsilon, not on the epsilon of a single sample." if user_bound else
               "There is no user-level bound: " + _user_bound_missing(result) + ".")
    return out


def _user_bound_missing(result) -> str:
    for rep in result.user_attacks.values():
        unresolved = getattr(rep, "unresolved", {})
        if "population_thresholds" in unresolved:
            return unresolved["population_thresholds"]
        pops = [w for k, w in unresolved.items() if k.startswith("pop_fpr_")]
        if pops:
            return "; ".join(pops)
    return "no user-level population threshold"


def _gate_lines(gate) -> list[str]:
    """The release-gate verdict: each budget's deciding metric, its upper bound and what the verdict means."""
    if gate is None:
        return []
    data = gate.to_dict() if hasattr(gate, "to_dict") else dict(gate)
    conf = data.get("confidence", 0.95)
    lines = [f"**Release gate: {data['status'].upper()}**", "",
             f"A budget passes only when the {conf:.0%} one-sided upper confidence bound of the TPR is within it for "
             "every attack and level, and fails only when a one-sided lower bound is over it; otherwise it is "
             "inconclusive (the audit shows neither), which blocks a release like a fail. Each bound is the looser of "
             "an exact binomial bound over the randomised units (the threshold's noise included) and the bootstrap's.",
             "", "| Budget | Deciding metric | TPR | Lower bound | Upper bound | Verdict |", "|---|---|---|---|---|---|"]
    for c in data["checks"]:
        if c["value"] is None:
            value = f"unresolvable: {c.get('n_non_members')} non-members, needs {c.get('non_members_needed')}"
        else:
            value = _num(c["value"])
        upper = "n/a" if c.get("upper") is None else f"{_num(c['upper'])} ({c.get('bound')})"
        lower = "n/a" if c.get("lower") is None else f"{_num(c['lower'])} ({c.get('lower_bound')})"
        mark = {"pass": "within budget", "fail": "**over budget**"}.get(c.get("status"), "**inconclusive**")
        lines.append(f"| TPR at FPR {_alpha(c['alpha'])} may be at most {c['max_tpr']:g} | `{c['metric']}` | "
                     f"{value} | {lower} | {upper} | {mark} |")
    if data.get("message"):
        lines += ["", data["message"][0].upper() + data["message"][1:] + "."]
    return lines + [""]


def _memorization_lines(table) -> list[str]:
    """The memorization-feature table (Mireshghallah et al. 2022, Sec. 4.6), when the audit computed it."""
    if table is None or len(table) == 0:
        return []
    first = table.iloc[0]
    lines = ["## Which members are exposed", "",
             f"Members flagged by `{first.get('attack', '')}` at FPR {_alpha(float(first.get('flagged_at_fpr')))} "
             "are predicted from simple features of the text (a logistic regression; higher test precision and "
             "recall mean the feature explains exposure better).", "",
             "| Features | Test precision | Test recall |", "|---|---|---|"]
    for _, row in table.iterrows():
        lines.append(f"| {row['features']} | {_num(row['test_precision'])} | {_num(row['test_recall'])} |")
    return lines + [""]


def _tables_lines(log_samples: bool | None) -> list[str]:
    """What the per-sample tables of the run expose (issue 21, High 1); nothing when not logged."""
    if log_samples is None:
        return []
    if not log_samples:
        text = ("`tables/samples.csv` lists each pool sample's id, keyed text hash, keyed group and label, and "
                "`tables/riskiest.csv` the members flagged at the lowest FPR by keyed hash only: no score, rank or "
                "token count, because anyone who can read this run and load the target model could recompute a "
                "candidate text's score and find its label beside it. `log_samples` (`--log-samples`) logs them.")
    else:
        text = ("**This run logged per-sample scores** (`log_samples`): `tables/samples.csv` holds every pool "
                "sample's scores, flags and token count beside its label, and `tables/riskiest.csv` the flagged "
                "members in score order with their scores. Masks are drawn from the seed and the text, so anyone "
                "who can read this run and load the target model can recompute a candidate text's score, find its "
                "row and read whether it was a member: give this run no wider read access than the training data.")
    return ["## What the logged tables expose", "", text, "",
            "The ROC curves and score histograms are drawn from all pool scores: in a small pool, someone who "
            "knows the pool's texts and can run the model could read labels off their steps.", ""]


def render_report(result, *, gate=None, title: str | None = None, artifacts=None,
                  group_column: str | None = None, hashing: str | None = None,
                  log_samples: bool | None = None, verdict=None) -> str:
    """Render an audit as Markdown for reviewers.

    Parameters
    ----------
    result : AuditResult
        A finished audit.
    gate : GateResult or dict, optional
        Release-gate verdict (:class:`mlflow_mia.metrics.gate.GateResult`) to show first.
    title : str, optional
        First heading; default names the target model.
    artifacts : iterable of str, optional
        Artifact paths to list at the end.
    group_column : str, optional
        Name of the user id column that defined the users of the user-level results.
    hashing : str, optional
        How the logged sample and group hashes are keyed (``HashKey.describe()``).
    log_samples : bool, optional
        Whether the run's tables hold per-sample scores; adds a section saying what
        the tables expose (none when None: the report is not part of a run).
    verdict : Verdict, optional
        The audit's verdict (:func:`mlflow_mia.tracking.verdict.audit_verdict`), shown first.

    Returns
    -------
    str
        Markdown without raw texts.
    """
    info, metrics, cfg = result.info, result.metrics, result.config
    fprs = cfg.metrics.fprs
    target = info.get("target_model") or "target model"
    lines = [f"# {title or 'Membership inference audit of ' + str(target)}", ""]
    if verdict is not None:
        lines += [verdict.markdown(), ""]
    lines += _gate_lines(gate)
    sig = cfg.signal
    per_token = ", per masked token" if getattr(sig, "energy_reduction", "sum") == "mean" else ""
    signal = (f"{sig.kind}{per_token}, {sig.num_masks} random masks at {sig.mask_rate:g} of tokens, seed {sig.seed}"
              if sig.kind == "energy" else f"{sig.kind} (every token masked once)" if sig.kind == "pll" else sig.kind)
    pool = f"{int(metrics.get('n_members', 0))} members, {int(metrics.get('n_non_members', 0))} non-members"
    by = f" by `{group_column}`" if group_column else ""
    if "user/n_members" in metrics:
        pool += (f"; grouped{by} into {int(metrics['user/n_members'])} member and "
                 f"{int(metrics['user/n_non_members'])} non-member users")
    lines += ["| | |", "|---|---|",
              f"| Target model | `{target}` |",
              f"| Reference model | `{info.get('reference_model') or 'none'}` |",
              f"| Audited pool | {pool} |",
              f"| Population set | {int(metrics.get('n_population', 0))} texts, used only to set thresholds |",
              f"| Attacks | {', '.join(f'`{a}`' for a in cfg.attacks)} |",
              f"| Signal | {signal} |",
              f"| Confidence intervals | {_resampling(result, group_column)} |"]
    if hashing:
        lines.append(f"| Sample and group hashes | HMAC-SHA256 with {hashing} |")
    lines.append("")
    brief = in_brief(result)
    if brief:
        lines += ["## In brief", "", brief, ""]
    lines += ["## Sample level", "", *_roc_table(result.attacks, fprs), "",
              "Thresholds set on the population set:", "", *_population_table(result.attacks), ""]
    if result.user_attacks:
        lines += ["## User level", "",
                  f"Each user (the samples sharing a user id{by}) is scored by the mean of its samples' scores.", "",
                  *_roc_table(result.user_attacks, fprs), "",
                  "Thresholds set on the population set's users:", "", *_population_table(result.user_attacks), ""]
    lines += _epsilon_lines(result)
    lines += _memorization_lines(getattr(result, "memorization_features", None))
    lines += _tables_lines(log_samples)
    lines += ["## How to read these numbers", "", _GLOSSARY, ""]
    warnings = list(result.warnings)
    n_trunc = int(metrics.get("n_truncated", 0) or 0)
    if n_trunc and not any("truncated" in w for w in warnings):
        warnings.append(f"{n_trunc} sample(s) longer than the model limit were truncated")
    lines += ["## Warnings", ""]
    lines += [f"- {w}" for w in warnings] if warnings else ["- none"]
    lines += ["", f"Truncated samples: {n_trunc}.", ""]
    if artifacts:
        lines += ["## Artifacts", "", *[f"- `{a}`" for a in artifacts], ""]
    return "\n".join(lines)


def render_comparison(table, *, alpha: str, references, pool: str, verdict=None, models=None) -> str:
    """Render a comparison of model versions (``mlflow-mia compare``) as Markdown.

    Parameters
    ----------
    table : pandas.DataFrame
        One row per (model, attack, level): ``model``, ``attack``, ``level``
        (``"sample"`` / ``"user"``), ``auc``, ``auc_ci_low``, ``auc_ci_high``,
        ``tpr_at_fpr_<alpha>`` and ``gate`` (``""`` without a gate).
    alpha : str
        The FPR of the TPR column, as in metric names (``"0.01"``).
    references : sequence of str
        URIs of the reference models the versions were audited against.
    pool : str
        One line describing the audited pool.
    verdict : Verdict, optional
        The most severe verdict of the versions (:func:`mlflow_mia.tracking.verdict.worst_verdict`),
        shown first as in every report.
    models : sequence of str, optional
        The registered model names compared, named in the title.

    Returns
    -------
    str
        Markdown without raw texts; a number that could not be computed reads ``n/a``, its
        reason under the table.
    """

    def ci(r) -> str:
        lo, hi = r["auc_ci_low"], r["auc_ci_high"]
        return "" if is_nan(lo) or is_nan(hi) else f" [{lo:.3f}, {hi:.3f}]"

    col = f"tpr_at_fpr_{alpha}"
    gated = "gate" in table and table["gate"].astype(str).str.len().gt(0).any()
    title = f"versions of {', '.join(f'`{m}`' for m in models)}" if models else "model versions"
    lines = [f"# Membership inference audit: {title} compared", ""]
    if verdict is not None:
        lines += [verdict.markdown(), ""]
    unresolved = False
    lines += [f"Reference model{'s' if len(references) > 1 else ''}: "
             f"{', '.join(f'`{uri}`' for uri in references if uri) or 'none'}. "
             f"Audited pool: {pool}. One nested run per "
             f"{'version and reference' if len(references) > 1 else 'version'}, all with the same pool, "
             "population set and settings.", ""]
    for level in ("sample", "user"):
        part = table[table["level"] == level]
        if part.empty:
            continue
        head = f"| Model version | Attack | AUC [CI] | TPR @ FPR {alpha} |" + (" Release gate |" if gated else "")
        lines += [f"## {level.capitalize()} level", "", head, "|---" * (5 if gated else 4) + "|"]
        for _, r in part.iterrows():
            unresolved = unresolved or is_nan(r["auc"]) or is_nan(r[col])
            lines.append(f"| {r['model']} | `{r['attack']}` | {fmt_number(r['auc'])}{ci(r)} | {fmt_number(r[col])} |"
                         + (f" {r['gate'] or '-'} |" if gated else ""))
        lines.append("")
    if unresolved:
        lines += ["n/a: the audit of that version could not compute the number; the reason is in the "
                  "`n/a` lines of that version's own report (its nested run).", ""]
    lines += ["AUC 0.5 means the attack cannot tell members from non-members; higher means more leakage. "
              f"TPR @ FPR {alpha} is the share of members recognised while flagging {alpha} of non-members. "
              "Each version's run holds its full report, figures and per-sample table.", ""]
    return "\n".join(lines)
