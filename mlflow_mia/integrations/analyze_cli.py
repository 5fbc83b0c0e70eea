"""``mlflow-mia analyze``: a thin shell over :func:`mlflow_mia.analyze.run_analysis`."""

from __future__ import annotations

import argparse

from mlflow_mia.integrations.values import blank, parse_list

__all__ = ["add_analyze_parser", "cmd_analyze"]


def add_analyze_parser(sub, flag) -> argparse.ArgumentParser:
    """Add the ``analyze`` subcommand to an ``argparse`` subparsers object (``flag``: the CLI's bool type)."""
    from mlflow_mia.analyze import FINDINGS

    p = sub.add_parser(
        "analyze", help="reproduce the papers' findings on the BBC News demo (why it leaks, what lowers it)",
        description="Train the demo target's variants (shorter training, a deeper model, names inserted, DP-SGD at "
                    "epsilon 8 and 1), audit each against the references, and log one nested run per audit and a "
                    "findings table (tables/findings.csv), plots and findings.md to the parent run. Resumes: "
                    "finished runs and registered variants are found and skipped. Findings: "
                    + ", ".join(f.name for f in FINDINGS) + ".")
    p.add_argument("--quick", nargs="?", const=True, default=False, type=flag, metavar="BOOL",
                   help="the quick size: the small demo, a few minutes (default: the full size, about an hour "
                        "on 2 CPU cores)")
    p.add_argument("--findings", metavar="A[,B]", help="run only these findings (default: all)")
    p.add_argument("--hash-key-file", metavar="PATH",
                   help="secret key for the logged sample hashes (default: $MLFLOW_MIA_HASH_KEY, else random)")
    p.add_argument("--experiment", metavar="NAME", help="MLflow experiment (ignored under mlflow run)")
    p.add_argument("--run-name", metavar="NAME", help="name of the parent run (default: analyze-<size>)")
    p.add_argument("--tracking-uri", metavar="URI", help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI)")
    p.add_argument("--cache-dir", metavar="DIR", help="signal cache directory (default: $MLFLOW_MIA_CACHE)")
    p.add_argument("--device", help="torch device (default: CUDA when available)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    return p


def cmd_analyze(args) -> int:
    """Run ``mlflow-mia analyze``; print the findings; returns 0 (errors raise ValueError)."""
    from mlflow_mia.analyze import ANALYSIS_SIZES, run_analysis
    from mlflow_mia.hashing import resolve_hash_key
    from mlflow_mia.integrations.session import build_demo_for_audit

    size = ANALYSIS_SIZES["quick" if args.quick else "full"]
    findings = parse_list(blank(args.findings), what="findings") if blank(args.findings) else None
    demo = build_demo_for_audit(size.demo_size, progress=not args.quiet, args=args)
    result = run_analysis(quick=args.quick, findings=findings, demo=demo, cache=blank(args.cache_dir),
                          progress=not args.quiet, hash_key=resolve_hash_key(blank(args.hash_key_file)),
                          device=blank(args.device), run_name=blank(args.run_name))
    table = result.table
    verdicts = table.drop_duplicates("finding")[["finding", "reproduced", "why"]]
    for _, row in verdicts.iterrows():
        print(f"{row['finding']:<17} reproduced: {row['reproduced']:<7} {row['why']}")
    print(f"ran {len(result.ran)} audit(s), reused {len(result.reused)}, trained {len(result.trained)} variant(s); "
          f"findings logged to run {result.run_id}: tables/findings.csv, findings.md, plots/findings/")
    for name, why in result.skipped.items():
        print(f"skipped {name}: {why}")
    return 0
