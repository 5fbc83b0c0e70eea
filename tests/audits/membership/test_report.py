"""render_report: a reviewer-readable Markdown summary without raw text."""

from __future__ import annotations

import random

import pytest

from mlflow_mia.audits.membership.report import render_report


@pytest.fixture(scope="module")
def result():
    from mlflow_mia.audits.membership import run_audit
    from mlflow_mia.config import AuditConfig
    from mlflow_mia.data import AuditDataset, PopulationSet
    from mlflow_mia.signals import MaskedLM
    from mlflow_mia.signals.testing import WORDS, tiny_bert

    rng = random.Random(1)
    words = [w for w in WORDS if w.isalpha()]
    texts = list(dict.fromkeys(" ".join(rng.choice(words) for _ in range(rng.randint(5, 10))) for _ in range(300)))
    pool = AuditDataset(texts=texts[:40], labels=[1] * 20 + [0] * 20, groups=[f"u{i // 2}" for i in range(40)])
    population = PopulationSet(texts=texts[40:140], groups=[f"p{i // 2}" for i in range(100)])
    model, tok = tiny_bert(seed=1)
    config = AuditConfig.from_dict({"signal": {"num_masks": 2},
                                    "metrics": {"fprs": [0.1, 0.05, 0.01], "bootstrap_rounds": 20}})
    res = run_audit(MaskedLM(model, tok, model_id="models:/tgt/7"), pool, population,
                    references=[MaskedLM(tiny_bert(tok, seed=2)[0], tok, model_id="models:/ref/1")],
                    config=config, progress=False)
    return res, texts[:140]


def test_report_has_headline_tables_and_explanations(result):
    res, texts = result
    md = render_report(res)
    assert md.startswith("# Membership inference audit of models:/tgt/7")
    assert "`models:/ref/1`" in md and "20 members, 20 non-members" in md
    assert "10 member and 10 non-member users" in md
    assert "| Attack | AUC [CI] | TPR @ FPR 0.1 | TPR @ FPR 0.05 | TPR @ FPR 0.01 |" in md
    assert "## Sample level" in md and "## User level" in md
    assert md.count("| `likelihood_ratio` |") >= 4  # ROC and population rows at both levels
    assert "Population FPR | Precision [CI] | Recall [CI]" in md  # with their bootstrap intervals
    assert "## In brief" in md and "0.5 would mean no leakage" in md
    assert "## How to read these numbers" in md
    assert "## Warnings" in md and "Truncated samples: 0." in md
    assert f"{res.attacks['loss'].roc.auc:.3f}" in md
    assert not [t for t in texts if t in md]


def test_report_shows_the_epsilon_lower_bound(result):
    res, _ = result
    md = render_report(res)
    assert "## Empirical epsilon lower bound" in md
    assert ("No training that is (eps, delta)-DP with eps below this value could have produced this attack "
            "result, with 95% confidence (delta = 1e-05).") in md
    for level, prefix in (("sample", ""), ("user", "user/")):
        for name in ("loss", "likelihood_ratio"):
            eps = res.metrics[f"{prefix}{name}/epsilon_lower_bound"]
            assert f"| `{name}` | {level} | {eps:.2f} |" in md


def test_report_says_what_was_resampled_and_why_rates_are_missing(result):
    res, _ = result
    md = render_report(res, group_column="article_id")
    assert ("| Confidence intervals | 20 bootstrap rounds, 95%; resampling groups (`article_id`) at sample level "
            "(10 member, 10 non-member), users at user level (10 member, 10 non-member), members and non-members "
            "apart |") in md
    # 20 non-members cannot resolve FPR 0.01, 10 non-member users not 0.05; 50 population articles give no
    # user-level threshold at 0.01 but do at 0.1 and 0.05.
    assert "Not resolved, shown as n/a: TPR @ FPR 0.01 (20 non-members < 100 needed for FPR 0.01)." in md
    assert "Not resolved, shown as n/a: TPR @ FPR 0.05 (10 non-member users < 20 needed for FPR 0.05)." in md
    assert "No threshold at population FPR 0.01: 50 population groups < 100 needed for FPR 0.01." in md
    assert "| `loss` | 0.05 |" in md.split("## User level")[1].split("## Empirical")[0]
    assert "has no group column" not in md


def test_report_gives_the_reason_when_a_level_has_no_population_threshold(result):
    import dataclasses

    res, _ = result
    why = "the population set has no group column"
    users = {n: dataclasses.replace(r, population=(), epsilon=None, unresolved={"population_thresholds": why})
             for n, r in res.user_attacks.items()}
    md = render_report(dataclasses.replace(res, user_attacks=users))
    assert "_No population thresholds at this level: the population set has no group column._" in md
    assert "There is no user-level bound: the population set has no group column." in md


def test_report_states_which_epsilon_bound_applies_and_its_ceiling(result):
    import dataclasses

    res, _ = result
    md = render_report(res)
    assert "| Trials (members, non-members) | Max certifiable |" in md
    for level, prefix, trials in (("sample", "", "20, 20"), ("user", "user/", "10, 10")):
        for name in ("loss", "likelihood_ratio"):
            ceiling = res.metrics[f"{prefix}{name}/epsilon_lower_bound_max_certifiable"]
            assert f" | {trials} | {ceiling:.2f} |" in md.split(f"| `{name}` | {level} |")[1].splitlines()[0]
    assert "it bounds group-level epsilon at best and is shown for reference only" in md
    assert "The user-level bound counts one trial per group (its samples' mean score) and is the one that applies" in md
    ungrouped = render_report(dataclasses.replace(res, user_attacks={}))
    assert "the sample-level bound holds only if samples were included in training independently" in ungrouped
    assert "group-level" not in ungrouped


def test_report_shows_gate_and_artifacts(result):
    from mlflow_mia.options.audit import Gate

    res, _ = result
    gate = Gate.parse("0.1:0.11").check(res.metrics)  # 20 members: too few to show a budget this tight
    assert gate.status in ("fail", "inconclusive")
    md = render_report(res, gate=gate, artifacts=["plots/roc.png", "report.md"], group_column="article_id")
    assert "grouped by `article_id`" in md
    assert f"**Release gate: {gate.status.upper()}**" in md
    worst = gate.checks[0]
    assert (f"| TPR at FPR 0.1 may be at most 0.11 | `{worst['metric']}` | {worst['value']:.3f} | "
            f"{worst['lower']:.3f} ({worst['lower_bound']}) | {worst['upper']:.3f} ({worst['bound']}) | "
            f"**{gate.status.replace('fail', 'over budget')}** |") in md
    assert gate.message()[1:] + "." in md
    assert "- `plots/roc.png`" in md
    exact = dict(res.metrics)  # every bound at its TPR: a gate decided on the values
    for key in [k for k in res.metrics if "/tpr_at_fpr_" in k and k.rsplit("_", 1)[-1][0].isdigit()]:
        for part in ("upper_binomial", "lower_binomial", "upper_bootstrap", "lower_bootstrap"):
            exact[f"{key}_{part}"] = 0.0 if res.metrics[key] != res.metrics[key] else res.metrics[key]
    passed = render_report(res, gate=Gate.parse("0.1:0.99").check(exact))
    assert "**Release gate: PASS**" in passed and "| within budget |" in passed
    assert "95% one-sided upper confidence bound of the TPR" in passed


def test_report_lists_warnings(result):
    import dataclasses

    res, _ = result
    noisy = dataclasses.replace(res, warnings=["user-level thresholds skipped: no group column"],
                                metrics={**res.metrics, "n_truncated": 3})
    md = render_report(noisy, title="Audit")
    assert md.startswith("# Audit")
    assert "- user-level thresholds skipped: no group column" in md
    assert "3 sample(s) longer than the model limit were truncated" in md and "Truncated samples: 3." in md


def test_report_shows_the_exposure_table(result):
    import dataclasses

    import pandas as pd

    res, _ = result
    table = pd.DataFrame({"features": ["C_non_alnum", "all"], "test_precision": [0.7, 0.8],
                          "test_recall": [0.5, 0.6], "attack": "likelihood_ratio", "flagged_at_fpr": 0.1})
    md = render_report(dataclasses.replace(res, memorization_features=table))
    assert "## Which members are exposed" in md and "flagged by `likelihood_ratio` at FPR 0.1" in md
    assert "| C_non_alnum | 0.700 | 0.500 |" in md
    assert "## Which members are exposed" not in render_report(dataclasses.replace(res, memorization_features=None))


def test_report_says_what_log_samples_exposes(result):
    res, _ = result
    off, on = render_report(res, log_samples=False), render_report(res, log_samples=True)
    assert "## What the logged tables expose" in off and "no score, rank or token count" in off
    assert "**This run logged per-sample scores** (`log_samples`)" in on and "read whether it was a member" in on
    assert "## What the logged tables expose" not in render_report(res)  # not part of a run


def test_the_comparison_opens_with_the_verdict_and_shows_n_a_never_nan():
    import math
    import re

    import pandas as pd

    from mlflow_mia.audits.membership.report import render_comparison
    from mlflow_mia.tracking.verdict import Verdict

    table = pd.DataFrame({"model": ["tgt v1", "tgt v2"], "attack": ["loss", "loss"], "level": ["sample", "sample"],
                          "auc": [0.61, math.nan], "auc_ci_low": [0.55, math.nan], "auc_ci_high": [0.67, math.nan],
                          "tpr_at_fpr_0.01": [math.nan, 0.2], "gate": ["", ""]})
    verdict = Verdict("leaks", "tgt v1: loss AUC 0.610 [0.550, 0.670] above 0.5")
    text = render_comparison(table, alpha="0.01", references=["models:/ref/1"], pool="20 members", verdict=verdict,
                             models=["tgt"])
    lines = text.splitlines()
    assert lines[0] == "# Membership inference audit: versions of `tgt` compared"
    assert lines[2] == "**Verdict: leaks** (tgt v1: loss AUC 0.610 [0.550, 0.670] above 0.5)."
    assert "| tgt v1 | `loss` | 0.610 [0.550, 0.670] | n/a |" in lines
    assert "| tgt v2 | `loss` | n/a | 0.200 |" in lines
    assert not re.search(r"\bnan\b", text, re.IGNORECASE)
    assert any(line.startswith("n/a: the audit of that version could not compute the number") for line in lines)


def test_every_report_opens_with_the_same_verdict_line(result):
    from mlflow_mia.tracking.verdict import Verdict

    verdict = Verdict("no evidence of leakage", "loss AUC interval contains 0.5; not a proof of privacy")
    lines = render_report(result[0], verdict=verdict).splitlines()
    assert lines[0] == "# Membership inference audit of models:/tgt/7"
    assert lines[2] == verdict.markdown() == ("**Verdict: no evidence of leakage** (loss AUC interval contains 0.5; "
                                              "not a proof of privacy).")
