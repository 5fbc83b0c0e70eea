"""Does a DP-SGD recipe memorise at all without noise? A probe for the ``dp_sgd`` finding.

The ``dp_sgd`` finding of ``mlflow-mia analyze`` compares each DP-SGD target with a
sigma = 0 control trained on the same recipe (Poisson batches, per-sample clipping, same
schedule, no noise). Its verdict can only be "reproduced" when that control leaks: if the
recipe memorises nothing before any noise is added, the noise has nothing to remove
(``docs/results/findings.md``). This script trains the control (and, with ``--epsilons``, DP
targets) at the ``full`` size with one seed and other learning rates, audits each against
the in-domain reference on the default demo's pool, and prints one JSON line per setting:
likelihood-ratio AUC with its article-level interval, TPR at 1 % FPR, held-out loss (nats
per masked token on the population sentences) and the accountant's epsilon.

It runs :func:`mlflow_mia.run_analysis` with a custom size (one seed, the full size's
pool and audit settings), so every number is also a logged run of the current MLflow
store (parent run ``dp-recipe lr <lr>``). The default demo is built on first use and
reused after; the non-private target (the demo's) and the null (its base model) are
audited again under the custom size. One seed backs no claim; the three-seed comparison
is ``mlflow run . -e analyze`` with the recipe changed in ``mlflow_mia/analyze/plan.py``.

Examples
--------
::

    python benchmarks/dp_recipe.py --learning-rates 2e-3,5e-3
    python benchmarks/dp_recipe.py --learning-rates 2e-3 --freeze ''   # train the embeddings too
    python benchmarks/dp_recipe.py --learning-rates 2e-3 --freeze '' --epsilons 8

Needs the ``demo`` and ``dp`` extras. About 8 minutes of DP-SGD training per model on 2
CPU cores, plus the default demo's build (7 minutes) when the store has none.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


def _floats(text: str) -> tuple:
    return tuple(float(x) for x in text.split(",") if x.strip())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--learning-rates", type=_floats, default=(2e-3,),
                        help="DP-SGD learning rates to probe, comma-separated (the full size uses 5e-4)")
    parser.add_argument("--epsilons", type=_floats, default=(),
                        help="target epsilons trained beside the sigma = 0 control (default: none)")
    parser.add_argument("--epochs", type=float, default=None, help="DP-SGD epochs (the full size's 15 by default)")
    parser.add_argument("--freeze", default=None,
                        help="parameter-name prefixes frozen during DP-SGD, comma-separated; '' trains every "
                             "parameter (default: the full size's, the embeddings)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    from mlflow_mia.analyze import ANALYSIS_SIZES, run_analysis
    from mlflow_mia.hashing import resolve_hash_key

    full = ANALYSIS_SIZES["full"]
    for lr in args.learning_rates:
        freeze = full.dp_freeze if args.freeze is None else tuple(x for x in args.freeze.split(",") if x)
        size = dataclasses.replace(full, seeds=(args.seed,), dp_epsilons=args.epsilons, dp_learning_rate=lr,
                                   dp_epochs=args.epochs if args.epochs is not None else full.dp_epochs,
                                   dp_freeze=freeze)
        start = time.perf_counter()
        result = run_analysis(size=size, findings=["dp_sgd"], progress=False, run_name=f"dp-recipe lr {lr:g}",
                              hash_key=resolve_hash_key())
        rows = result.table[result.table["attack"] == "likelihood_ratio"]
        for _, r in rows.iterrows():
            print(json.dumps({"learning_rate": lr, "epochs": size.dp_epochs, "freeze": list(freeze), "seed": args.seed,
                              "setting": r["setting"], "lr_auc": round(r["auc"], 3),
                              "lr_auc_ci": [round(r["auc_ci_low"], 3), round(r["auc_ci_high"], 3)],
                              "tpr_at_fpr_0.01": round(r["tpr_at_fpr_0.01"], 3),
                              "heldout_loss": round(r["heldout_loss"], 3),
                              "null_lr_auc": round(r["null_auc"], 3), "null_heldout_loss": round(r["null_heldout_loss"], 3),
                              "dp_epsilon": None if r["dp_epsilon"] != r["dp_epsilon"] else round(r["dp_epsilon"], 2),
                              "parent_run": result.run_id}), flush=True)
        print(json.dumps({"learning_rate": lr, "seconds": round(time.perf_counter() - start),
                          "trained": [u.split("/")[1] for u in result.trained]}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
