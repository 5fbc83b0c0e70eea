"""``mlflow-mia analyze``: a thin shell over :func:`mlflow_mia.analyze.run_analysis`."""

from __future__ import annotations

from mlflow_mia.entrypoints.common import EXIT_OK
from mlflow_mia.options.values import blank
from mlflow_mia.analyze import ANALYSIS_SIZES, run_analysis
from mlflow_mia.entrypoints.common import build_demo_for_audit
from mlflow_mia.hashing import resolve_hash_key

__all__: list[str] = []


def cmd_analyze(args) -> int:
    """Run ``mlflow-mia analyze``; print the findings; returns 0 (errors raise ValueError)."""
    size = ANALYSIS_SIZES["quick" if args.quick else "full"]
    findings = [f.strip() for f in args.findings.split(",") if f.strip()] if blank(args.findings) else None
    hash_key = args.hash_key_file or resolve_hash_key()  # read (and checked) when the flag was parsed
    demo = build_demo_for_audit(size.demo_size, progress=not args.no_progress, experiment=args.experiment)
    result = run_analysis(quick=bool(args.quick), findings=findings, demo=demo, cache=args.cache_dir,
                          progress=not args.no_progress, hash_key=hash_key, device=args.device,
                          run_name=blank(args.run_name))
    if not blank(args.run_name):  # also renames the run `mlflow run` created
        import mlflow

        name = f"analyze {'quick' if args.quick else 'full'}"
        mlflow.MlflowClient().set_tag(result.run_id, "mlflow.runName", name)
    table = result.table
    verdicts = table.drop_duplicates("finding")[["finding", "reproduced", "why"]]
    for _, row in verdicts.iterrows():
        print(f"{row['finding']:<17} verdict: {row['reproduced']:<14} {row['why']}")
    print(f"ran {len(result.ran)} audit(s), reused {len(result.reused)}, trained {len(result.trained)} variant(s); "
          f"findings logged to run {result.run_id}: tables/findings.csv, findings.md, plots/findings/")
    for name, why in result.skipped.items():
        print(f"skipped {name}: {why}")
    return EXIT_OK
