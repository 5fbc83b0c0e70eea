"""Every attack on the default demo, by the reference models it may use: the table of ``docs/attacks.md``.

Run from a folder whose MLflow store holds the default demo (``mlflow-mia build-demo``) and its
shadow references (``mlflow-mia build-demo --references``)::

    python benchmarks/attacks_table.py                  # default demo; prints the Markdown table
    python benchmarks/attacks_table.py --size small     # the small demo (minutes)

Each reference set is one ``mlflow-mia audit`` (the same CLI a user runs, printed before it
runs) with ``--reference-mode set``; the signals of every model are computed once and read
from the signal cache afterwards. The table reads each run's logged metrics: AUC and TPR at
10 % and 1 % FPR (thresholds from the population set), each with its 95 % interval from the
cluster bootstrap that resamples articles (the unit whose membership was assigned).

Reference sets (the default demo's registered models):

- none: reference-free attacks (loss, zlib, min-k, Min-K%++);
- base: the public base model the target was fine-tuned from (``bbc-base@champion``);
- shadow-0: one reference fine-tuned on a random half of public in-domain text;
- k = 2, k = 4: shadow-0..1, shadow-0..3 (``lira_offline`` and ``rmia`` use the set,
  ``likelihood_ratio`` is reported against each);
- oracle: the demo's in-domain reference (same base, recipe and distribution as the
  target, disjoint data: what a user rarely has).

Prints the goal check of issue 23: with k = 4 non-oracle references, the best set attack's
TPR at 1 % FPR against 1.5 x that of the single non-oracle reference's likelihood ratio
(shadow-0) and against the oracle reference's likelihood ratio.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time

REFERENCE_FREE = ("loss", "zlib", "min_k", "min_k_plus_plus")
SET_ATTACKS = ("likelihood_ratio", "lira_offline", "rmia")


def reference_sets(prefix: str) -> list[tuple[str, list[str], tuple[str, ...]]]:
    """``(label, reference URIs, attacks)`` of each audit, in table order."""
    uri = "models:/{}{}@champion".format
    shadows = [uri(prefix, f"shadow-{i}") for i in range(4)]
    return [("none", [], REFERENCE_FREE),
            ("base", [uri(prefix, "base")], SET_ATTACKS),
            ("shadow-0", shadows[:1], SET_ATTACKS),
            ("k=2 shadows", shadows[:2], SET_ATTACKS),
            ("k=4 shadows", shadows, SET_ATTACKS),
            ("oracle", [uri(prefix, "reference")], ("likelihood_ratio",))]


def run_audit_cli(label: str, references: list[str], attacks, args) -> str:
    """Run one audit through the CLI; return its MLflow run id."""
    run_name = f"attacks-table {args.size} {label}"
    argv = [sys.executable, "-P", "-m", "mlflow_mia.entrypoints.cli", "audit", "--demo-size", args.size,
            "--attacks", ",".join(attacks), "--run-name", run_name, "--experiment", args.experiment,
            "--no-progress"]
    if references:
        argv += ["--reference", ",".join(references), "--reference-mode", "set"]
    print("$ mlflow-mia", shlex.join(argv[4:]), flush=True)
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True)
    print(f"  exit {proc.returncode} in {time.perf_counter() - start:.0f} s", flush=True)
    if proc.returncode not in (0, 3):
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
        raise SystemExit(f"the audit of reference set {label!r} failed")
    import mlflow

    runs = mlflow.search_runs(experiment_names=[args.experiment], filter_string=f"attributes.run_name = '{run_name}'",
                              order_by=["attributes.start_time DESC"], max_results=1, output_format="list")
    return runs[0].info.run_id


def metric_prefixes(metrics: dict, attack: str) -> list[str]:
    """``attack`` and its per-reference variants (``likelihood_ratio.reference_2`` ...), as logged."""
    names = {key.split("/")[0] for key in metrics if key.split("/")[0].split(".")[0] == attack}
    return sorted(names, key=lambda n: (len(n), n))


def cell(metrics: dict, key: str) -> str:
    value = metrics.get(key)
    if value is None:
        return "n/a"
    low, high = metrics.get(key + "_ci_low"), metrics.get(key + "_ci_high")
    if low is None or high is None:
        return f"{value:.3f}"
    return f"{value:.3f} [{low:.3f}, {high:.3f}]"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", default="default", choices=("default", "small"))
    parser.add_argument("--experiment", default="mlflow-mia attacks table")
    parser.add_argument("--skip-run", nargs="*", default=None, metavar="RUN_ID",
                        help="read these runs (in table order) instead of auditing again")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    from mlflow import MlflowClient

    prefix = "bbc-" if args.size == "default" else "bbc-small-"
    sets = reference_sets(prefix)
    run_ids = args.skip_run or [run_audit_cli(label, refs, attacks, args) for label, refs, attacks in sets]
    client = MlflowClient()
    rows, tpr1 = [], {}
    for (label, refs, attacks), run_id in zip(sets, run_ids):
        metrics = client.get_run(run_id).data.metrics
        for attack in attacks:
            for name in metric_prefixes(metrics, attack):
                rows.append(f"| {label} | {name} | {cell(metrics, name + '/auc')} | "
                            f"{cell(metrics, name + '/tpr_at_fpr_0.1')} | {cell(metrics, name + '/tpr_at_fpr_0.01')} |")
                tpr1[(label, name)] = metrics.get(name + "/tpr_at_fpr_0.01", float("nan"))
    print(f"\nruns: {' '.join(run_ids)}\n")
    print("| references | attack | AUC [95 % CI] | TPR at 10 % FPR | TPR at 1 % FPR |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))
    best = max(((tpr1[("k=4 shadows", a)], a) for a in ("lira_offline", "rmia") if ("k=4 shadows", a) in tpr1))
    single, oracle = tpr1[("shadow-0", "likelihood_ratio")], tpr1[("oracle", "likelihood_ratio")]
    print(f"\ngoal: best set attack with k = 4 ({best[1]}) TPR at 1 % FPR {best[0]:.3f}; "
          f"1.5 x single shadow likelihood ratio = {1.5 * single:.3f} -> {'met' if best[0] >= 1.5 * single else 'missed'}; "
          f"oracle likelihood ratio = {oracle:.3f} -> {'met' if best[0] >= oracle else 'missed'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
