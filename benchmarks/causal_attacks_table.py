"""Every causal attack on the causal or the LoRA demo, paired against the likelihood ratio: the tables of
``docs/results/attacks.md`` ("Causal and LoRA demos").

Run from a folder with its own tracking store and signal cache (the demo is built on first use)::

    python benchmarks/causal_attacks_table.py --demo-kind causal --size small
    python benchmarks/causal_attacks_table.py --demo-kind lora --size small
    python benchmarks/causal_attacks_table.py --demo-kind lora --size default   # reuses a registered build

One ``mlflow-mia audit`` runs every attack against the demo's one reference (printed before it
runs, as a user would type it): the causal demo's in-domain reference (a model trained like
the target from scratch on disjoint articles), or the LoRA adapter's own base
(``--reference base``, the demo's default). The first table reads that run's logged metrics:
AUC, the TPR at 10 % and 1 % FPR read off the pool's exact ROC (``tpr_at_fpr_0.1``,
``tpr_at_fpr_0.01``), each with its 95 % interval from the cluster bootstrap that resamples
articles, and the one-sided lower bound of the TPR at 1 % FPR that a release gate fails on
(``tpr_at_fpr_0.01_lower``).

Then each attack ``b`` against the likelihood ratio ``a`` (and each reference-free one against
Min-K%++, the strongest reference-free attack of a gate's default set) by one paired bootstrap on the pool
(:func:`mlflow_mia.metrics.paired.paired_bootstrap`: each round draws member and non-member
articles once, apart, and reads both attacks on that draw), in AUC and in the TPR at 10 % and
1 % FPR: the difference ``b - a`` with its 95 % percentile interval and a verdict by the project's
rule (:func:`mlflow_mia.metrics.paired.claim_verdict`) on each one-sided claim: **better** when
"a - b >= 0" is not reproduced (the interval lies above 0), **worse** when "b - a >= 0" is not
reproduced (it lies below 0), **same** when every resample gives 0 (with one reference
``lira_offline`` and ``rmia`` rank texts as the likelihood ratio does), **not resolved**
otherwise. The scores
come from auditing again in this process through the library (``run_audit`` with the options
parsed from the same command line; signals from the cache, ``grad_norm``'s backward passes
again); nothing of it is logged, and the script stops unless it gives the logged run's AUC and
TPRs. A JSON record (command, run id, times, metrics, paired intervals) goes to ``--json``;
``--render`` prints the tables again from such a record without running anything.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from attacks_table import _fmt, _interval, cell, check_same_as_logged  # noqa: E402  (benchmarks/ on sys.path)

#: Every attack that scores a causal LM with one reference (lira_online needs a shadow record,
#: neighbourhood a masked generator: not run here).
ATTACKS = ("loss", "zlib", "min_k", "min_k_plus_plus", "recall", "dc_pdd", "grad_norm",
           "likelihood_ratio", "lira_offline", "rmia", "ez_mia", "wbc")
BASELINE = "likelihood_ratio"
#: The strongest reference-free attack of a gate's default set on the demos, and the reference-free
#: attacks compared against it too (the gate's choice when no reference model is at hand).
FREE_BASELINE = "min_k_plus_plus"
REFERENCE_FREE = ("loss", "zlib", "min_k", "recall", "dc_pdd", "grad_norm")
#: Statistics compared: (label, alpha or None for AUC).
COMPARED = (("AUC", None), ("TPR at 10 % FPR", 0.1), ("TPR at 1 % FPR", 0.01))


def audit_argv(args) -> list[str]:
    """The ``mlflow-mia audit`` arguments (after ``mlflow-mia``)."""
    argv = ["audit", "--demo-kind", args.demo_kind, "--demo-size", args.size, "--attacks", ",".join(args.attacks),
            "--run-name", f"attacks-table {args.demo_kind} {args.size}", "--experiment", args.experiment,
            "--no-progress"]
    if args.target:
        argv += ["--target", args.target]
    if args.reference:
        argv += ["--reference", args.reference]
    return argv


def run_audit_cli(args) -> tuple[str, float]:
    """Run the audit through the CLI; its MLflow run id and wall time in seconds."""
    argv = [sys.executable, "-P", "-m", "mlflow_mia.entrypoints.cli", *audit_argv(args)]
    print("$ mlflow-mia", shlex.join(argv[4:]), flush=True)
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    print(f"  exit {proc.returncode} in {seconds:.0f} s", flush=True)
    if proc.returncode not in (0, 3):
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit("the audit failed")
    import mlflow

    name = audit_argv(args)[audit_argv(args).index("--run-name") + 1]
    runs = mlflow.search_runs(experiment_names=[args.experiment], filter_string=f"attributes.run_name LIKE '%{name}'",
                              order_by=["attributes.start_time DESC"], max_results=1, output_format="list")
    return runs[0].info.run_id, seconds


def rescore(args):
    """The audit again, in this process and unlogged: its ``AuditResult`` and wall time."""
    from mlflow_mia.audits.membership import run_audit
    from mlflow_mia.entrypoints.cli import build_parser
    from mlflow_mia.entrypoints.common import audit_settings, build_demo_for_audit
    from mlflow_mia.models.resolve import resolve_model, resolve_reference
    from mlflow_mia.signals import SignalCache

    cli = build_parser().parse_args(audit_argv(args))
    demo = build_demo_for_audit(args.size, progress=False, experiment=cli.experiment, kind=args.demo_kind)
    target_uri = args.target or demo.target_uri
    config, options, pool, population = audit_settings(cli, data=str(demo.pool_path), demo=demo,
                                                       target_uri=target_uri)
    target = resolve_model(target_uri, role="target", trust_remote_code=options.trust_remote_code,
                           base_model=options.base_model)
    [refs] = options.reference_sets
    models = [resolve_reference(uri, target=target, trust_remote_code=options.trust_remote_code) for uri in refs]
    start = time.perf_counter()
    result = run_audit(target, pool, population, references=models or None, config=config,
                       cache=SignalCache(options.cache_dir), device=options.device, progress=False)
    seconds = time.perf_counter() - start
    print(f"  re-scored in this process in {seconds:.0f} s (unlogged)", flush=True)
    return result, seconds


def paired_rows(result, baseline: str = BASELINE, attacks=None) -> tuple[list[dict], str]:
    """Each of ``attacks`` (default: all others) against ``baseline``, per statistic of :data:`COMPARED`; and how
    it was resampled."""
    import numpy as np

    from mlflow_mia.metrics.bootstrap import tpr_at_fpr_statistic
    from mlflow_mia.metrics.paired import paired_bootstrap
    from mlflow_mia.metrics.roc import auc_statistic
    from mlflow_mia.metrics.thresholds import unresolved_reason

    samples, mc = result.samples, result.config.metrics
    y = samples["label"].to_numpy()
    groups = samples["group"].to_numpy() if samples["group"].notna().all() else None
    a_all = samples[f"score_{baseline}"].to_numpy(float)
    rows, how = [], ""
    for name in result.attacks:
        if name == baseline or (attacks is not None and name not in attacks):
            continue
        b_all = samples[f"score_{name}"].to_numpy(float)
        keep = ~(np.isnan(a_all) | np.isnan(b_all))
        for label, alpha in COMPARED:
            row = {"attack": name, "baseline": baseline, "statistic": label, "dropped": int((~keep).sum())}
            why = None if alpha is None else unresolved_reason(int((y[keep] == 0).sum()), alpha, unit="non-members")
            if why:
                rows.append({**row, "verdict": f"not resolved ({why})"})
                continue
            stat = auc_statistic if alpha is None else tpr_at_fpr_statistic(alpha)
            c = paired_bootstrap(y[keep], a_all[keep], b_all[keep], statistic=stat,
                                 groups=None if groups is None else groups[keep], rounds=mc.bootstrap_rounds,
                                 confidence=mc.confidence, seed=mc.seed, margin=0.0)
            rows.append({**row, "a": c.a, "b": c.b, "difference": c.difference,
                         "interval": list(c.difference_interval), "verdict": verdict(*c.difference_interval)})
            d = c.distribution
            unit = "articles" if d.unit == "group" else "sentences"
            how = (f"{mc.bootstrap_rounds} rounds, each drawing {d.n_member_units} member and "
                   f"{d.n_non_member_units} non-member {unit} once for both attacks; "
                   f"{mc.confidence * 100:g} % percentile intervals, seed {mc.seed}")
    return rows, how


def verdict(low: float, high: float) -> str:
    """``better`` / ``worse`` / ``same`` / ``not resolved`` from the interval of ``b - a`` (module docstring).

    >>> verdict(0.01, 0.05), verdict(-0.05, -0.01), verdict(0.0, 0.0), verdict(-0.02, 0.03), verdict(0.0, 0.03)
    ('better', 'worse', 'same', 'not resolved', 'not resolved')
    """
    from mlflow_mia.metrics.paired import claim_verdict

    if low == 0.0 and high == 0.0:
        return "same"
    if claim_verdict(-high, -low, 0.0) == "not reproduced":  # "a - b >= 0" wholly refuted: b - a > 0
        return "better"
    return "worse" if claim_verdict(low, high, 0.0) == "not reproduced" else "not resolved"


def markdown_paired(rows: list[dict]) -> list[str]:
    """One line per attack: ``b - a [CI] verdict`` for each statistic."""
    by_attack: dict[str, dict] = {}
    for r in rows:
        by_attack.setdefault(r["attack"], {})[r["statistic"]] = r
    out = ["| attack b | " + " | ".join(f"{label}: b - a [95 % CI], verdict" for label, _ in COMPARED) + " |",
           "|---|" + "---|" * len(COMPARED)]
    for name, stats in by_attack.items():
        cells = []
        for label, _ in COMPARED:
            r = stats[label]
            if "difference" not in r:
                cells.append(r["verdict"])
                continue
            word = verdict(*r["interval"])  # from the interval (records written before "same" existed too)
            cells.append(f"{_fmt(r['difference'], True)} {_interval(r['interval'], True)} **{word}**")
        dropped = next(iter(stats.values()))["dropped"]
        note = f" ({dropped} unscored rows left out)" if dropped else ""
        out.append(f"| {name}{note} | " + " | ".join(cells) + " |")
    return out


KEPT = ("auc", "tpr_at_fpr_0.1", "tpr_at_fpr_0.01", "tpr_at_fpr_0.01_lower")


def render(record: dict) -> None:
    """Print the two Markdown tables of a record (:func:`main`'s ``--json``)."""
    metrics, attacks = record["metrics"], record.get("attacks") or list(dict.fromkeys(
        k.split("/")[0] for k in record["metrics"]))
    pool = record.get("pool", {})
    audit_s = record["audit_seconds"]
    audit = f"audit {audit_s:.0f} s" if audit_s is not None and math.isfinite(audit_s) else "audit run before (--skip-run)"
    print(f"\nrun: {record['run_id']}; {audit}, re-score "
          f"{record['rescore_seconds']:.0f} s" + (f"; pool {pool['members']} member and {pool['non_members']} "
                                                  "non-member sentences" if pool else "") + "\n")
    print("| attack | AUC [95 % CI] | TPR at 10 % FPR (`tpr_at_fpr_0.1`) | TPR at 1 % FPR (`tpr_at_fpr_0.01`) | "
          "gate's lower bound at 1 % FPR (`tpr_at_fpr_0.01_lower`) |")
    print("|---|---|---|---|---|")
    for name in attacks:
        lower = metrics.get(f"{name}/tpr_at_fpr_0.01_lower")
        print(f"| {name} | {cell(metrics, name + '/auc')} | {cell(metrics, name + '/tpr_at_fpr_0.1')} | "
              f"{cell(metrics, name + '/tpr_at_fpr_0.01')} | {'n/a' if lower is None else f'{lower:.3f}'} |")
    for baseline in dict.fromkeys(r.get("baseline", BASELINE) for r in record["paired"]):
        print(f"\neach attack b against {baseline} a, paired bootstrap ({record['resampling']}):\n")
        print("\n".join(markdown_paired([r for r in record["paired"] if r.get("baseline", BASELINE) == baseline])))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--demo-kind", default="causal", choices=("causal", "lora"))
    parser.add_argument("--size", default="small", choices=("default", "small"))
    parser.add_argument("--attacks", type=lambda s: tuple(s.split(",")), default=ATTACKS)
    parser.add_argument("--target", help="target URI (default: the demo's)")
    parser.add_argument("--reference", help="reference URI (default: the demo's)")
    parser.add_argument("--experiment", default="mlflow-mia attacks table")
    parser.add_argument("--skip-run", metavar="RUN_ID", help="read this run instead of auditing again")
    parser.add_argument("--json", metavar="PATH", help="write the record here")
    parser.add_argument("--render", metavar="PATH", help="print the tables of this record; run nothing")
    args = parser.parse_args(argv)
    if args.render:
        render(json.loads(Path(args.render).read_text()))
        return 0
    if BASELINE not in args.attacks:
        parser.error(f"--attacks must include {BASELINE}, the baseline of the paired comparisons")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    from mlflow import MlflowClient

    from mlflow_mia.tracking.headline import full_metrics

    run_id, audit_s = (args.skip_run, math.nan) if args.skip_run else run_audit_cli(args)
    metrics = full_metrics(MlflowClient(), run_id)  # every metric: the run's table artifact
    result, rescore_s = rescore(args)
    check_same_as_logged(f"{args.demo_kind} {args.size}", result, metrics)
    rows, how = paired_rows(result)
    if FREE_BASELINE in result.attacks:
        rows += paired_rows(result, FREE_BASELINE, REFERENCE_FREE)[0]
    s = result.samples
    record = {"command": "mlflow-mia " + shlex.join(audit_argv(args)), "run_id": run_id,
              "audit_seconds": None if math.isnan(audit_s) else audit_s, "rescore_seconds": rescore_s, "resampling": how,
              "pool": {"members": int((s["label"] == 1).sum()), "non_members": int((s["label"] == 0).sum())},
              "attacks": list(result.attacks),
              "metrics": {k: v for k, v in metrics.items() if k.split("/")[0] in result.attacks
                          and k.split("/")[-1].split("_ci_")[0] in KEPT},
              "paired": rows}
    render(record)
    if args.json:
        Path(args.json).write_text(json.dumps(record, indent=1, default=float) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
