"""Score every attack with 1, 2, 4, ... recipe-matched shadows and compare each with the single-reference likelihood ratio.

The scoring half of issue 35's measurement (``benchmarks/shadow_scaling.py`` trains the
models and stores their signals). Run::

    python benchmarks/shadow_scaling_report.py --signals OUT --split .gpu/split.json

It reads the stored signals and runs the audit's own stage 2
(:func:`mlflow_mia.audits.membership.score_audit`, no model) on the demo pool:

* k = 1: the reference-free attacks and ``likelihood_ratio`` against the single
  recipe-matched reference (the baseline of every comparison);
* k = 2, 4, 8, ... up to the shadows stored: ``rmia`` on each text's OUT shadows and,
  from k = 4 (LiRA's spreads need two OUT and two IN shadows of each text),
  ``lira_offline`` on the OUT shadows and ``lira_online`` (pooled spreads below 64
  shadows), the latter with each mask as one query (``per_mask_queries``) and without;

with article-resampled 95 % intervals (the demo randomised membership by article), and a
paired article-level bootstrap (:func:`mlflow_mia.metrics.paired.paired_bootstrap`) of each
attack's TPR at FPR 1 % and 0.1 % against the baseline: the difference, the ratio, and the
claim "attack >= 2 x baseline" decided by :func:`~mlflow_mia.metrics.paired.claim_verdict`
(reproduced when the ratio's lower bound is >= 2, not reproduced when its upper bound is
below 2, else not resolved). It writes ``benchmarks/results/shadow_scaling.json``,
``docs/images/shadow_scaling.png`` and ``docs/results/shadows.md``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from shadow_scaling import unpack  # noqa: E402  (this folder is on sys.path when run as a script)
from mlflow_mia.attacks import ReferenceSignals  # noqa: E402
from mlflow_mia.audits.membership import score_audit  # noqa: E402
from mlflow_mia.config import AuditConfig  # noqa: E402
from mlflow_mia.data import AuditDataset, PopulationSet  # noqa: E402
from mlflow_mia.audits.membership.signals import AuditSignals  # noqa: E402
from mlflow_mia.metrics.bootstrap import tpr_at_fpr_statistic  # noqa: E402
from mlflow_mia.metrics.paired import claim_verdict, paired_bootstrap  # noqa: E402

BASELINE = "likelihood_ratio"
FREE = ("loss", "zlib", "min_k", "min_k_plus_plus")
ALPHAS = (0.01, 0.001)
FACTOR = 2.0


def load(signals_dir: Path, split_path: Path):
    """Pool, population, the stored signals by model name, the design, and the shadow membership matrix."""
    frames = json.loads(split_path.read_text())["frames"]
    pool_frame, pop_frame = pd.DataFrame(frames["pool"]), pd.DataFrame(frames["population"])
    pool = AuditDataset.from_frame(pool_frame, group_column="article_id")
    population = PopulationSet.from_frame(pop_frame, group_column="article_id")
    design = json.loads((signals_dir / "design.json").read_text())
    models = {}
    for file in sorted(signals_dir.glob("signals_*.npz")):
        with np.load(file) as arrays:
            arrays = dict(arrays)
        for name in sorted({key.split(".")[0] for key in arrays}):
            models[name] = unpack(arrays, name)
    shadows = [n for n in (f"shadow-{i}" for i in range(len(design["shadow_articles"]))) if n in models]
    k_done = len(shadows) - len(shadows) % 2
    articles = np.array(list(pool_frame["article_id"]) + list(pop_frame["article_id"]), dtype=str)
    membership = np.stack([np.isin(articles, design["shadow_articles"][i]) for i in range(k_done)], axis=1)
    return pool, population, models, design, membership, k_done


def _score(pool, population, signals: dict, attacks, rounds: int, **attack_options):
    fprs = (0.1,) + ALPHAS
    config = AuditConfig(attacks=tuple(attacks), metrics={"fprs": fprs, "bootstrap_rounds": rounds, **attack_options})
    hashes = tuple(pool.text_hashes) + tuple(population.text_hashes)
    return score_audit(AuditSignals(signals, text_hashes=hashes), pool, population, config)


def _rows(result, k: int, rename: dict | None = None) -> dict:
    rows = {}
    for name, report in result.attacks.items():
        label = (rename or {}).get(name, name)
        row = {"attack": label, "k": k, "auc": float(report.roc.auc), "auc_ci": list(report.ci.get("auc", (np.nan,) * 2)),
               "scores": result.samples[f"score_{name}"].to_numpy()}
        for alpha in ALPHAS:
            row[f"tpr_{alpha}"] = float(report.tpr_at_fpr[alpha])
            row[f"tpr_{alpha}_ci"] = list(report.ci.get(f"tpr_at_fpr_{alpha}", (np.nan,) * 2))
        rows[label] = row
    return rows


def score_all(pool, population, models, membership, k_done: int, rounds: int) -> list[dict]:
    """One row per (attack, k): point values, intervals, and the pool's scores (dropped before writing)."""
    target, reference = models["target"], models["reference"]
    base = _score(pool, population, {"target": target, "reference": reference,
                                     "references": ReferenceSignals((reference,))}, FREE + (BASELINE,), rounds)
    rows = list(_rows(base, 1).values())
    for k in [k for k in (2, 4, 8, 16, 32, 64) if k <= k_done]:
        shadows = ReferenceSignals(tuple(models[f"shadow-{i}"] for i in range(k)))
        signals = {"target": target, "reference": shadows.signals[0], "references": shadows,
                   "shadow_membership": membership[:, :k]}
        # LiRA's spreads need two OUT (and two IN) shadows of a text: k >= 4.
        attacks = ("rmia",) + (("lira_offline", "lira_online") if k >= 4 else ())
        rows += _rows(_score(pool, population, signals, attacks, rounds), k).values()
        if k >= 4:
            queries = _score(pool, population, signals, ("lira_online",), rounds, lira_online_per_mask_queries=True)
            rows += _rows(queries, k, {"lira_online": "lira_online (per-mask queries)"}).values()
        print(f"k = {k}: scored", flush=True)
    return rows


def _paired(pool, a: dict, b: dict, alpha: float, rounds: int) -> dict:
    c = paired_bootstrap(np.asarray(pool.labels), a["scores"], b["scores"], statistic=tpr_at_fpr_statistic(alpha),
                         factor=FACTOR, groups=pool.groups, rounds=rounds)
    return {"difference": c.difference, "difference_ci": list(c.difference_interval), "ratio": c.ratio,
            "ratio_ci": list(c.ratio_interval), "claim": c.claim, "verdict": c.verdict,
            "gain_verdict": claim_verdict(*c.ratio_interval, 1.0)}


def compare(pool, rows: list[dict], rounds: int) -> None:
    """Add to each row the paired article-level bootstrap against the baseline (and per-mask queries against averaged).

    Only at the FPRs the pool resolves (1 / alpha non-members or more, the audit's rule).
    """
    n_non_members = int(np.sum(np.asarray(pool.labels) == 0))
    base = next(r for r in rows if r["attack"] == BASELINE)
    for row in rows:
        for alpha in (a for a in ALPHAS if n_non_members * a >= 1):
            if row is not base:
                row[f"vs_baseline_{alpha}"] = _paired(pool, base, row, alpha, rounds)
            if row["attack"] == "lira_online (per-mask queries)":
                averaged = next(r for r in rows if r["attack"] == "lira_online" and r["k"] == row["k"])
                row[f"vs_averaged_{alpha}"] = _paired(pool, averaged, row, alpha, rounds)


def plot(rows: list[dict], path: Path) -> None:
    """TPR at FPR 1 % against the number of shadows, with the baseline's interval as a band."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    base = next(r for r in rows if r["attack"] == BASELINE)
    ax.axhspan(*base["tpr_0.01_ci"], color="0.85", label=f"{BASELINE}, one reference (95 % interval)")
    ax.axhline(base["tpr_0.01"], color="0.4", lw=1)
    for i, name in enumerate(("lira_online", "lira_online (per-mask queries)", "lira_offline", "rmia")):
        mine = sorted((r for r in rows if r["attack"] == name), key=lambda r: r["k"])
        if not mine:
            continue
        ks = np.array([r["k"] for r in mine]) * (1 + 0.03 * (i - 1.5))
        tpr = np.array([r["tpr_0.01"] for r in mine])
        ci = np.array([r["tpr_0.01_ci"] for r in mine]).T
        ax.errorbar(ks, tpr, yerr=[tpr - ci[0], ci[1] - tpr], marker="o", capsize=3, label=name)
    ax.set_xscale("log", base=2)
    ks = sorted({r["k"] for r in rows if r["k"] > 1})
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.set_xlabel("shadow models k (trained with the target's recipe)")
    ax.set_ylabel("TPR at FPR 1 % (sentence level)")
    ax.set_title("Attack success against the number of shadows (default demo)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--signals", type=Path, required=True, help="the folder shadow_scaling.py train wrote")
    parser.add_argument("--split", type=Path, default=Path(".gpu/split.json"))
    parser.add_argument("--rounds", type=int, default=1000, help="bootstrap rounds (intervals and paired tests)")
    parser.add_argument("--json", type=Path, default=ROOT / "benchmarks/results/shadow_scaling.json")
    parser.add_argument("--plot", type=Path, default=ROOT / "docs/images/shadow_scaling.png")
    parser.add_argument("--page", type=Path, default=ROOT / "docs/results/shadows.md")
    args = parser.parse_args(argv)
    pool, population, models, design, membership, k_done = load(args.signals, args.split)
    global ALPHAS
    ALPHAS = tuple(a for a in ALPHAS if len(population) * a >= 1)  # the small demo's 300 cannot set FPR 0.1 %
    rows = score_all(pool, population, models, membership, k_done, args.rounds)
    compare(pool, rows, args.rounds)
    for row in rows:
        del row["scores"]
    record = {"command": " ".join(["python benchmarks/shadow_scaling_report.py"] + (argv or sys.argv[1:])),
              "design": {k: v for k, v in design.items() if k != "shadow_articles"}, "k_done": k_done,
              "n_pool": len(pool),
              "n_member_articles": len({g for g, y in zip(pool.groups, pool.labels) if y == 1}), "n_non_members": int(np.sum(np.asarray(pool.labels) == 0)),
              "n_population": len(population), "rounds": args.rounds, "rows": rows}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(record, indent=1, default=float))
    plot(rows, args.plot)
    from shadow_scaling_page import write_page
    write_page(record, args.page, plot_path=args.plot)
    print(f"wrote {args.json}, {args.plot}, {args.page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
