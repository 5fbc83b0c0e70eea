"""Where the neighbourhood attack's signal is, and where its noise comes from (BBC demo).

For each generator setting, every pool text and each of its neighbours is scored
by the target under PLL, token by token; the changed region of a pair is found
under the target tokenizer (``mlflow_mia.signals.neighbour_local.changed_region``).
Per pair::

    d_swap = sum NLL(neighbour, changed tokens) - sum NLL(text, changed tokens)
    d_ctx  = sum NLL(neighbour, unchanged tokens) - sum NLL(text, unchanged tokens)

The paper's score is ``mean_j PLL(x_j) - PLL(x)`` (PLL = mean NLL per token);
``local`` is ``mean_j d_swap``; ``context`` is ``mean_j d_ctx``. AUCs are given on
two halves of the pool split by article (A: where choices were made, B: held out),
B with a 95 % bootstrap interval.

Usage (after ``mlflow-mia build-demo --size small``)::

    MLFLOW_TRACKING_URI=sqlite:////tmp/nb/mlflow.db MLFLOW_MIA_DEMO_DIR=/tmp/nb/demo \\
        python benchmarks/diagnose_neighbours.py --size small --cache /tmp/nb/cache
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd
from sklearn.metrics import roc_auc_score

from mlflow_mia.config import NeighbourhoodConfig, SignalConfig
from mlflow_mia.demo.build import demo_spec
from mlflow_mia.models.resolve import resolve_model
from mlflow_mia.metrics.bootstrap import bootstrap_ci
from mlflow_mia.metrics.roc import auc_statistic
from mlflow_mia.signals import SignalCache, compute_signals
from mlflow_mia.signals.energy import tokenize
from mlflow_mia.signals.generator_quality import generator_accuracy
from mlflow_mia.signals.neighbour_local import changed_region
from mlflow_mia.signals.neighbours import generate_neighbours


def halves(pool: pd.DataFrame, seed: int = 0) -> np.ndarray:
    """Boolean mask of half A: a seeded half of the articles (members and non-members of an article stay together)."""
    articles = np.array(sorted(pool["article_id"].unique()))
    rng = np.random.default_rng(seed)
    a = set(rng.choice(articles, size=len(articles) // 2, replace=False))
    return pool["article_id"].isin(a).to_numpy()


def pair_terms(target, texts, neighbours, sig: SignalConfig, cache):
    """Per text: PLL, and per neighbour: PLL, d_swap, d_ctx (arrays)."""
    flat = [x for nb in neighbours for x in nb]
    res = compute_signals(target, list(texts) + flat, sig, cache=cache, progress=False)
    ids, maskable, _ = tokenize(target, list(texts) + flat, max_length=target.max_length)
    nll = [-np.asarray(lp, dtype=np.float64) for lp in res.token_logprobs]
    full = []  # per position NLL (NaN on special tokens)
    for k in range(len(ids)):
        v = np.full(len(ids[k]), np.nan)
        v[maskable[k]] = nll[k]
        full.append(v)
    rows, j = [], len(texts)
    for i, nb in enumerate(neighbours):
        a = full[i]
        swaps, ctxs, plls = [], [], []
        for _ in nb:
            b = full[j]
            p, s = changed_region(ids[i], ids[j])
            swaps.append(np.nansum(b[p:len(b) - s]) - np.nansum(a[p:len(a) - s]))
            ctx_a = np.concatenate([a[:p], a[len(a) - s:]])
            ctx_b = np.concatenate([b[:p], b[len(b) - s:]])
            ctxs.append(np.nansum(ctx_b - ctx_a))
            plls.append(res.values[j])
            j += 1
        rows.append((res.values[i], np.array(plls), np.array(swaps), np.array(ctxs)))
    return rows


def auc_line(name, y, score, half_a, rounds=300):
    ok = ~np.isnan(score)
    out = {"score": name}
    for tag, m in (("A", half_a & ok), ("B", ~half_a & ok)):
        out[f"AUC {tag}"] = roc_auc_score(y[m], score[m])
    m = ~half_a & ok
    lo, hi = bootstrap_ci(y[m], score[m], statistics={"auc": auc_statistic}, rounds=rounds, seed=0)["auc"]
    out["B 95% CI"] = f"[{lo:.3f}, {hi:.3f}]"
    return out


def run_setting(label, target, generator, texts, y, half_a, population, nc: NeighbourhoodConfig, sig, cache):
    t0 = time.perf_counter()
    nbs = generate_neighbours(generator, texts, config=nc, seed=0, progress=False, cache=cache)
    rows = pair_terms(target, texts, nbs, sig, cache)
    pll = np.array([r[0] for r in rows])
    gap = abs(pll[y == 1].mean() - pll[y == 0].mean())
    paper = np.array([r[1].mean() - r[0] if len(r[1]) else np.nan for r in rows])
    local = np.array([r[2].mean() if len(r[2]) else np.nan for r in rows])
    ctx = np.array([r[3].mean() if len(r[3]) else np.nan for r in rows])
    shifts = np.concatenate([np.abs(r[1] - r[0]) for r in rows])
    acc, _ = generator_accuracy(generator, population, n_texts=150, seed=0)
    stats = {"setting": label, "gen acc": acc, "gap": gap,
             "shift>gap": float(np.mean(shifts > gap)), "sd(PLL nb)": float(np.nanmean([r[1].std() for r in rows if len(r[1])]))}
    for cls, name in ((1, "mem"), (0, "non")):
        sel = [r for r, c in zip(rows, y) if c == cls and len(r[2])]
        stats[f"d_swap {name}"] = float(np.mean([r[2].mean() for r in sel]))
        stats[f"d_ctx {name}"] = float(np.mean([r[3].mean() for r in sel]))
    aucs = [auc_line(f"{label}: {n}", y, s, half_a) for n, s in (("paper", paper), ("local", local),
                                                                  ("context", ctx))]
    stats["s"] = round(time.perf_counter() - t0, 1)
    return stats, aucs


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="small")
    ap.add_argument("--cache", default=None)
    ap.add_argument("--n", type=int, default=25, help="neighbours per text")
    ap.add_argument("--settings", default="reference,ood,target,nodrop,n5,m2")
    args = ap.parse_args(argv)
    spec = demo_spec(args.size)
    pool = pd.read_json(spec.pool_path, lines=True)
    population = pd.read_json(spec.population_path, lines=True)["text"].tolist()
    texts, y = pool["text"].tolist(), pool["is_member"].to_numpy().astype(int)
    half_a = halves(pool)
    cache = SignalCache(args.cache) if args.cache else None
    target = resolve_model(spec.target_uri, role="target").lm
    models = {"reference": resolve_model(spec.reference_uri, role="reference").lm,
              "ood": resolve_model(spec.ood_reference_uri, role="reference").lm, "target": target}
    sig = SignalConfig(kind="pll")
    print(f"pool {int(y.sum())} members + {int((y == 0).sum())} non-members "
          f"(half A {int(half_a.sum())}, half B {int((~half_a).sum())}), population {len(population)}, PLL")
    loss = -compute_signals(target, texts, sig, cache=cache, progress=False).values
    all_aucs = [auc_line("loss", y, loss, half_a)]
    settings = {"reference": ("reference", NeighbourhoodConfig(num_neighbours=args.n)),
                "ood": ("ood", NeighbourhoodConfig(num_neighbours=args.n)),
                "target": ("target", NeighbourhoodConfig(num_neighbours=args.n)),
                "nodrop": ("reference", NeighbourhoodConfig(num_neighbours=args.n, dropout=0.0)),
                "n5": ("reference", NeighbourhoodConfig(num_neighbours=5)),
                "m2": ("reference", NeighbourhoodConfig(num_neighbours=args.n, num_replacements=2))}
    stats = []
    for key in args.settings.split(","):
        gen, nc = settings[key]
        label = f"{key} (gen={gen}, n={nc.num_neighbours}, m={nc.num_replacements}, p={nc.dropout})"
        s, a = run_setting(label, target, models[gen], texts, y, half_a, population, nc, sig, cache)
        stats.append(s)
        all_aucs += a
        print(s, flush=True)
    pd.set_option("display.width", 250)
    pd.set_option("display.max_columns", 30)
    print("\nPer-pair terms (nats, means over texts of the mean over neighbours):")
    print(pd.DataFrame(stats).round(3).to_string(index=False))
    print("\nAUC (A = half used for choices, B = held out):")
    print(pd.DataFrame(all_aucs).round(3).to_string(index=False))


if __name__ == "__main__":
    main()
