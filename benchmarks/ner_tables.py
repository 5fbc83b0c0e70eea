"""docs/guides/ner.md's demo tables, read from the logged runs of ``mlflow run . -e ner-audit``.

Finds the newest finished parent run ``ner-audit wnut-default`` (or ``--run-id``) in the
current tracking store (``MLFLOW_TRACKING_URI``, else ``sqlite:///mlflow.db``) and its two
nested audits (model A and B, each the other's reference tagger), and prints, from their
logged metrics only (nothing is recomputed):

1. names per class and type (dev / test);
2. M-MEM per type and model, in percent: best and worst prompt chosen on dev (test score,
   dev in parentheses), gap and sigma over prompts on dev, mean over prompts on all names,
   the name alone (-PT), AVG-C; the controlled row is the mean of A and B;
3. the per-name ratio score (``ratio_avg_mmem``) next to each model's best prompt, with
   95 % intervals resampling names;
4. the dev gap and sigma against the label-permutation null (95th percentile, p-value) and
   Kendall's tau of the prompts' dev vs test M-MEM;
5. counts behind docs/guides/ner.md's "What held" list.

Example::

    mlflow run . -e ner-audit --env-manager local
    python benchmarks/ner_tables.py
"""

from __future__ import annotations

import argparse
import math


def _pct(value, digits: int = 1) -> str:
    return "nan" if value is None or math.isnan(value) else f"{100 * value:.{digits}f}"


def _runs(client, run_id: str | None):
    """(parent run, {"A": run, "B": run}) of one two-tagger NER demo audit."""
    if run_id is None:
        experiments = [e.experiment_id for e in client.search_experiments()]
        found = client.search_runs(experiments, filter_string="attributes.run_name = 'ner-audit wnut-default' and "
                                                              "attributes.status = 'FINISHED'",
                                   order_by=["attributes.start_time DESC"], max_results=1)
        if not found:
            raise SystemExit("no finished run named 'ner-audit wnut-default' in this tracking store: "
                             "run `mlflow run . -e ner-audit --env-manager local` first, or pass --run-id")
        parent = found[0]
    else:
        parent = client.get_run(run_id)
    children = client.search_runs([parent.info.experiment_id],
                                  filter_string=f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")
    by_model = {}
    for label in ("A", "B"):
        uri = parent.data.params[f"ner.model_{label.lower()}"]
        by_model[label] = next(c for c in children
                               if uri in (c.data.params.get("ner.model"), c.data.params.get("ner.model_requested")))
    return parent, by_model


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run-id", help="the parent run (default: the newest 'ner-audit wnut-default')")
    args = parser.parse_args(argv)
    import mlflow

    client = mlflow.MlflowClient()  # MLFLOW_TRACKING_URI, else MLflow's default sqlite:///mlflow.db
    parent, runs = _runs(client, args.run_id)
    m = {k: r.data.metrics for k, r in runs.items()}
    pm = parent.data.metrics
    types = parent.data.params["ner.entity_types"].split(",")  # logged by the two-tagger demo
    print(f"parent run {parent.info.run_id} ({parent.info.run_name}); A: {runs['A'].info.run_id}, "
          f"B: {runs['B'].info.run_id}\n")

    print("| type | names per class | dev | test |\n|---|---|---|---|")
    for t in types:
        dev, test = m["A"].get(f"ner/{t}/n_names_dev", math.nan), m["A"].get(f"ner/{t}/n_names_test", math.nan)
        print(f"| {t} | {int((dev + test) / 2)} | {int(dev / 2)} + {int(dev / 2)} | {int(test / 2)} + {int(test / 2)} |")

    print("\n| type | model | best (dev) | worst (dev) | gap | sigma | mean over prompts, all names | -PT | AVG-C |")
    print("|---|---|---|---|---|---|---|---|---|")
    for t in types:
        g = lambda mm, key: mm.get(f"ner/{t}/{key}", math.nan)  # noqa: E731
        for label in ("A", "B"):
            x = m[label]
            print(f"| {t} | {label} | {_pct(g(x, 'best_prompt_mmem'))} ({_pct(g(x, 'best_prompt_mmem_dev'))}) | "
                  f"{_pct(g(x, 'worst_prompt_mmem'))} ({_pct(g(x, 'worst_prompt_mmem_dev'))}) | "
                  f"{_pct(g(x, 'prompt_gap'))} | {_pct(g(x, 'prompt_std'))} | {_pct(g(x, 'prompt_mean_all'))} | "
                  f"{_pct(g(x, 'no_pt_mmem'))} | {_pct(g(x, 'avg_c_mmem'))} |")
        c = lambda key: pm.get(f"ner/{t}/controlled/{key}", math.nan)  # noqa: E731
        no_pt = (g(m["A"], "no_pt_mmem") + g(m["B"], "no_pt_mmem")) / 2
        print(f"| {t} | controlled | **{_pct(c('best_prompt_mmem'))}** | {_pct(c('worst_prompt_mmem'))} | "
              f"{_pct(c('prompt_gap'))} | {_pct(c('prompt_std'))} | **{_pct(c('prompt_mean_all'))}** | "
              f"{_pct(no_pt)} | {_pct(c('avg_c_mmem'))} |")

    print("\n| type | model A best-prompt M-MEM | model B best-prompt M-MEM | ratio `ratio_avg_mmem` (A against B) |")
    print("|---|---|---|---|")
    for t in types:
        cells = []
        for label in ("A", "B"):
            x = m[label]
            cells.append(f"{x[f'ner/{t}/best_prompt_mmem']:.3f} [{x[f'ner/{t}/best_prompt_mmem_ci_low']:.3f}, "
                         f"{x[f'ner/{t}/best_prompt_mmem_ci_high']:.3f}]")
        x = m["A"]
        ratio = (f"{x.get(f'ner/{t}/ratio_avg_mmem', math.nan):.3f} [{x.get(f'ner/{t}/ratio_avg_mmem_ci_low', math.nan):.2f}, "
                 f"{x.get(f'ner/{t}/ratio_avg_mmem_ci_high', math.nan):.2f}]")
        print(f"| {t} | {cells[0]} | {cells[1]} | {ratio} |")

    pairs = [(t, label, {k.split("/", 2)[2]: v for k, v in m[label].items() if k.startswith(f"ner/{t}/")})
             for t in types for label in ("A", "B")]
    print("\n| type | model | best (dev) | worst (dev) | gap | gap null 95% | p | sigma | sigma null 95% | p | "
          "Kendall tau dev-test |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    above = []
    for t, label, x in pairs:
        gap_above = x["prompt_gap"] > x["prompt_gap_null_q95"]
        std_above = x["prompt_std"] > x["prompt_std_null_q95"]
        p_gap, p_std = x["prompt_gap_null_pvalue"], x["prompt_std_null_pvalue"]
        above.append((t, label, gap_above, std_above, p_gap, p_std))
        bold = lambda text, flag: f"**{text}**" if flag else text  # noqa: E731
        print(f"| {t} | {label} | {_pct(x['best_prompt_mmem'])} ({_pct(x['best_prompt_mmem_dev'])}) | "
              f"{_pct(x['worst_prompt_mmem'])} ({_pct(x['worst_prompt_mmem_dev'])}) | "
              f"{bold(_pct(x['prompt_gap']), gap_above)} | {_pct(x['prompt_gap_null_q95'])} | "
              f"{bold(f'{p_gap:.2f}', gap_above)} | {bold(_pct(x['prompt_std']), std_above)} | "
              f"{_pct(x['prompt_std_null_q95'])} | {bold(f'{p_std:.2f}', std_above)} | "
              f"{x['kendall_tau_dev_test']:.2f} |")

    n = len(pairs)
    print(f"\ncounts over the {n} model-type pairs:")
    print(f"- dev gap above the null's 95th percentile: {sum(a[2] for a in above)} "
          f"({', '.join(f'{t} {lab} p={pg:.3f}' for t, lab, ga, _, pg, _ in above if ga) or 'none'}); "
          f"sigma above: {sum(a[3] for a in above)} "
          f"({', '.join(f'{t} {lab} p={ps:.3f}' for t, lab, _, sa, _, ps in above if sa) or 'none'}); "
          f"p < 0.05/{n} (Bonferroni): gap {sum(a[4] < 0.05 / n for a in above)}, sigma {sum(a[5] < 0.05 / n for a in above)}")
    gaps_dev = [x["prompt_gap"] for *_, x in pairs]
    print(f"- dev gap range {_pct(min(gaps_dev))} to {_pct(max(gaps_dev))}"
          f" pp (by value: {sorted(round(100 * g, 1) for g in gaps_dev)}); "
          f"sigma {sorted(round(100 * x['prompt_std'], 1) for *_, x in pairs)}; "
          f"null q95 of the gap {sorted(round(100 * x['prompt_gap_null_q95'], 1) for *_, x in pairs)}")
    print(f"- Kendall tau dev-test: {sorted(round(x['kendall_tau_dev_test'], 2) for *_, x in pairs)}")
    print(f"- dev-best prompt below the dev-worst prompt on test: "
          f"{[f'{t} {lab}' for t, lab, x in pairs if x['best_prompt_mmem'] < x['worst_prompt_mmem']]}")
    print(f"- dev-best prompt above -PT on test: {sum(x['best_prompt_mmem'] > x['no_pt_mmem'] for *_, x in pairs)}, "
          f"equal: {sum(x['best_prompt_mmem'] == x['no_pt_mmem'] for *_, x in pairs)}")
    print(f"- AVG-C above the dev-best prompt on test: {sum(x['avg_c_mmem'] > x['best_prompt_mmem'] for *_, x in pairs)}")
    print(f"- token removal raised the best prompt's dev score: "
          f"{sum(x['best_modified_mmem_dev'] > x['best_prompt_mmem_dev'] for *_, x in pairs)} "
          f"(gains pp {sorted(round(100 * (x['best_modified_mmem_dev'] - x['best_prompt_mmem_dev']), 1) for *_, x in pairs)}); "
          f"lowered the worst one's: {sum(x['worst_modified_mmem_dev'] < x['worst_prompt_mmem_dev'] for *_, x in pairs)}; "
          f"best-modified above best on test: {sum(x['best_modified_mmem'] > x['best_prompt_mmem'] for *_, x in pairs)}")
    tpr = [(t, lab, x.get("best_prompt_tpr_at_fpr_0.1", math.nan)) for t, lab, x in pairs]
    print(f"- TPR at 10 % FPR, best prompt, test: {', '.join(f'{t} {lab} {v:.2f}' for t, lab, v in tpr)}")
    for label in ("A", "B"):
        vals = [v for _, lab, v in tpr if lab == label]
        print(f"  mean over types, model {label}: {sum(vals) / len(vals):.2f}")
    print(f"- person dev best -> best-modified: A {_pct(m['A']['ner/person/best_prompt_mmem_dev'])} -> "
          f"{_pct(m['A']['ner/person/best_modified_mmem_dev'])}, B {_pct(m['B']['ner/person/best_prompt_mmem_dev'])} -> "
          f"{_pct(m['B']['ner/person/best_modified_mmem_dev'])}; worst-modified person dev: "
          f"A {_pct(m['A']['ner/person/worst_modified_mmem_dev'])}, B {_pct(m['B']['ner/person/worst_modified_mmem_dev'])}")
    gaps = {label: [x["prompt_gap"] for _, lab, x in pairs if lab == label] for label in ("A", "B")}
    print(f"- mean dev gap over types: A {100 * sum(gaps['A']) / len(gaps['A']):.1f} pp, "
          f"B {100 * sum(gaps['B']) / len(gaps['B']):.1f} pp; largest test gap "
          f"{max(100 * x['prompt_gap_test'] for *_, x in pairs):.1f} pp")
    means = [(t, pm.get(f"ner/{t}/controlled/prompt_mean_all", math.nan)) for t in types]
    print(f"- controlled mean over prompts, all names: {', '.join(f'{t} {_pct(v)}' for t, v in means)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
