"""Write docs/results/shadows.md from benchmarks/results/shadow_scaling.json (see shadow_scaling_report.py)."""

from __future__ import annotations

import math
from pathlib import Path

BASELINE = "likelihood_ratio"
ORDER = ("loss", "zlib", "min_k", "min_k_plus_plus", BASELINE, "rmia", "lira_offline", "lira_online",
         "lira_online (per-mask queries)")


def _num(x) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"


def _ci(ci) -> str:
    if all(isinstance(x, float) and math.isnan(x) for x in ci):
        return ""
    return f"[{_num(ci[0])}, {_num(ci[1])}]"


def _ratio(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return "inf" if math.isinf(x) else f"{x:.2f}"


def _rows_sorted(rows):
    return sorted(rows, key=lambda r: (r["k"], ORDER.index(r["attack"]) if r["attack"] in ORDER else 99))


def _get(row, key, default=float("nan")):
    return row.get(key, default)


def _metric_table(rows) -> list[str]:
    out = ["| attack | shadows k | AUC | TPR at FPR 1 % | TPR at FPR 0.1 % |", "|---|---|---|---|---|"]
    for r in _rows_sorted(rows):
        k = "0" if r["attack"] in ORDER[:4] else ("1 (reference)" if r["attack"] == BASELINE else str(r["k"]))
        out.append(f"| `{r['attack']}` | {k} | {_num(r['auc'])} {_ci(r['auc_ci'])} | "
                   f"{_num(r['tpr_0.01'])} {_ci(r['tpr_0.01_ci'])} | {_num(_get(r, 'tpr_0.001'))} "
                   f"{_ci(_get(r, 'tpr_0.001_ci', [float('nan')] * 2))} |")
    return out


def _paired_table(rows, alpha: float) -> list[str]:
    key = f"vs_baseline_{alpha}"
    out = ["| attack | k | difference | ratio | gain (ratio >= 1) | claim: ratio >= 2 |", "|---|---|---|---|---|---|"]
    for r in _rows_sorted(rows):
        c = r.get(key)
        if c is None or r["attack"] in ORDER[:4]:
            continue
        out.append(f"| `{r['attack']}` | {r['k']} | {c['difference']:+.3f} {_ci(c['difference_ci'])} | "
                   f"{_ratio(c['ratio'])} [{_ratio(c['ratio_ci'][0])}, {_ratio(c['ratio_ci'][1])}] | {c['gain_verdict']} | "
                   f"{c['verdict']} |")
    return out


def _row(rows, attack, k):
    return next((r for r in rows if r["attack"] == attack and r["k"] == k), None)


def _claim_sentence(r, base) -> str:
    c = r["vs_baseline_0.01"]
    return (f"`{r['attack']}` with {r['k']} shadows: TPR {_num(r['tpr_0.01'])} at FPR 1 % against "
            f"{_num(base['tpr_0.01'])}, ratio {_ratio(c['ratio'])} [{_ratio(c['ratio_ci'][0])}, "
            f"{_ratio(c['ratio_ci'][1])}]: \"at least 2x\" **{c['verdict']}**, a gain (ratio >= 1) "
            f"**{c['gain_verdict']}**.")


def _goal(record: dict) -> list[str]:
    rows, k_done = record["rows"], record["k_done"]
    base = next(r for r in rows if r["attack"] == BASELINE)
    ks = sorted({16, k_done} & {r["k"] for r in rows})
    found = [r for k in ks for a in ("lira_online", "lira_online (per-mask queries)") if (r := _row(rows, a, k))]
    if not found:
        return [f"Online LiRA needs 4 shadows or more; this run stored {k_done}: the goal is not measured."]
    out = ["The goal of issue 35 is online LiRA with 16 shadows at >= 2x the TPR at FPR 1 % of the single-reference "
           "likelihood ratio, resolved by a paired article-level bootstrap. Measured:", ""]
    out += [f"- {_claim_sentence(r, base)}" for r in found]
    goal = _row(rows, "lira_online", 16)
    if goal is not None and goal["vs_baseline_0.01"]["verdict"] != "reproduced":
        out += ["", "So the 2x goal is **not reached as a resolved claim**: the point estimates are above 2x, but the "
                f"lower bounds of the ratios are not: the pool's members come from {record['n_member_articles']} "
                f"articles, the threshold at FPR 1 % is set by about {record['n_non_members'] // 100} non-members, "
                "and the intervals resample whole articles. That online LiRA beats the single-reference "
                "likelihood ratio is resolved where the gain column says reproduced."]
    return out


def _queries(rows) -> list[str]:
    pairs = [r for r in rows if "vs_averaged_0.01" in r]
    if not pairs:
        return []
    out = ["## Per-mask queries", "",
           "`lira_online_per_mask_queries` keeps each mask's energy as one query (LiRA's augmentations) instead of "
           "averaging the K masks first. Paired against the averaged statistic (same shadows), TPR at FPR 1 %:", "",
           "| k | per-mask | averaged | difference | per-mask at least as high (ratio >= 1) |", "|---|---|---|---|---|"]
    for r in sorted(pairs, key=lambda r: r["k"]):
        c = r["vs_averaged_0.01"]
        averaged = _row(rows, "lira_online", r["k"])
        out.append(f"| {r['k']} | {_num(r['tpr_0.01'])} | {_num(averaged['tpr_0.01'])} | "
                   f"{c['difference']:+.3f} {_ci(c['difference_ci'])} | {c['gain_verdict']} |")
    gains = {r["vs_averaged_0.01"]["gain_verdict"] for r in pairs}
    out += ["", "The option's default stays **off**: " + (
        "no k resolves a gain over averaging, and the per-mask test holds K times the statistics."
        if gains != {"reproduced"} else "(a gain is resolved at every k: consider turning it on).")]
    return out


def _costs(design: dict) -> list[str]:
    models = design.get("models", {})
    shadows = [m for n, m in models.items() if n.startswith("shadow-")]
    if not shadows:
        return ["No shadow finished."]
    train = sum(m["train_s"] for m in shadows)
    sig = sum(m["signals_s"] for m in shadows)
    where = design.get("gpu") or design.get("device")
    return [f"On {where} (torch {design.get('torch')}): the base trained in {design.get('base_seconds')} s, "
            f"the target in {models['target']['train_s']} s ({models['target']['steps']} steps), each shadow in "
            f"{train / len(shadows):.1f} s on average ({shadows[0]['steps']} steps for about "
            f"{sum(m['texts'] for m in shadows) / len(shadows):.0f} sentences), and each model's signals "
            f"(energy, K = {design['signal']['num_masks']}, of the {'pool and population'} texts) took "
            f"{sig / len(shadows):.1f} s: {len(shadows)} shadows cost {train + sig:.0f} s in all.",
            "",
            "On the project's 2-core CPU machine (shared with other jobs), `python benchmarks/shadow_scaling.py "
            "train --split .gpu-small/split.json --shadows 4 --device cpu` (the small demo's split) trained each "
            "shadow (290-390 steps) in 25-97 s; `mlflow-mia audit --demo-size small --demo-shadows 4` "
            "trained its four in 700 s ([Reference sets and shadows](../guides/reference-sets.md)). The default "
            "demo's shadows were not trained on the CPU."]


def _fpr_0001(record) -> list[str]:
    if any("vs_baseline_0.001" in r for r in record["rows"]):
        return ["### TPR at FPR 0.1 %", "", *_paired_table(record["rows"], 0.001), ""]
    return ["TPR at FPR 0.1 % is not resolved on this pool: it has "
            f"{record['n_non_members']} non-member sentences, and a threshold at FPR 0.1 % needs at least 1,000 "
            "(the audit's own rule); its column above reads n/a for that reason.", ""]


def write_page(record: dict, path: Path, *, plot_path: Path) -> None:
    """The generated results page: design, cost, tables, paired comparisons, the plot."""
    design, rows = record["design"], record["rows"]
    shadows = sum(1 for name in design.get("models", {}) if name.startswith("shadow-"))
    image = Path("../images") / Path(plot_path).name
    lines = [
        "<!-- Generated by benchmarks/shadow_scaling_report.py from benchmarks/results/shadow_scaling.json; "
        "do not edit by hand. -->",
        "# Results: how much do more shadow models buy",
        "",
        "This page answers how attack success grows with the number of shadow models trained like the target "
        "(offline and online LiRA, RMIA), against the likelihood ratio with one reference, on the default demo.",
        "",
        "## How it was run",
        "",
        "```bash",
        f"python benchmarks/shadow_scaling.py prepare --size {design['size']} --out .gpu",
        f"python benchmarks/shadow_scaling.py train --split .gpu/split.json --shadows {shadows} --out OUT "
        f"--device {design['device']}",
        record["command"],
        "```",
        "",
        f"The first command writes the {design['size']} demo's split (the BBC News articles: "
        f"{record['n_pool']} pool sentences, half of them from the target's training articles, and "
        f"{record['n_population']} population sentences). The second retrains, with the demo's own recipes "
        f"(`DEMO_SIZES['{design['size']}']`), the base, the target (15 epochs over its member articles), one reference with "
        "the target's recipe on in-domain articles that are no candidates (the baseline's single reference), and "
        "the shadows with the target's recipe on halves, by article, of the candidate set (pool, population and "
        f"reference articles up to twice the target's training sentences: {design['n_candidates']} sentences of "
        f"{design['n_candidate_articles']} articles). The halves come in complementary pairs, so the first k shadows "
        "hold every candidate IN for exactly k / 2 of them. These models are retrained for this measurement: they "
        "are not the registered demo models, and their numbers differ from the demo audit's.",
        "",
        *_costs(design),
        "",
        "All numbers are sentence-level; intervals are 95 % percentile intervals that resample articles (the "
        f"unit the demo randomised), {record['rounds']} rounds. `lira_online` uses one pooled spread each for IN and "
        "OUT (below 64 shadows, as the paper does); `lira_offline` and `rmia` use each text's OUT shadows.",
        "",
        "## The answer",
        "",
        *_goal(record),
        "",
        f"![TPR at FPR 1 % against the number of shadows]({image.as_posix()})",
        "",
        "## Every attack",
        "",
        *_metric_table(rows),
        "",
        "## Paired against the single-reference likelihood ratio",
        "",
        "Paired article-level bootstrap of each attack against `likelihood_ratio` with one reference: the "
        "difference and ratio of TPR (95 % intervals), and the claim \"at least 2x\" by the project's rule "
        "(reproduced: the ratio's lower bound >= 2; not reproduced: its upper bound < 2; else not resolved).",
        "",
        "### TPR at FPR 1 %",
        "",
        *_paired_table(rows, 0.01),
        "",
        *_fpr_0001(record),
        *_queries(rows),
        "",
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))
