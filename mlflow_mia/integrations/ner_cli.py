"""``mlflow-mia ner-audit``: the NER prompt memorization audit from the command line.

With ``--model`` and ``--names`` it audits one registered (or saved) token
classifier. Without them it builds the WNUT-16 demo (:mod:`mlflow_mia.demo.wnut`;
skipped when already registered) and audits both taggers, each in a nested run,
then logs to the parent run the control-corrected means (model A on its names, B on
the same names with labels swapped), Kendall's tau of prompt scores across the two
models, and a combined report.
"""

from __future__ import annotations

import argparse
import os

from mlflow_mia.integrations.values import blank as _blank

__all__ = ["add_ner_parser", "cmd_ner_audit"]


def add_ner_parser(sub) -> argparse.ArgumentParser:
    """Add the ``ner-audit`` subcommand to an ``argparse`` subparsers object."""
    p = sub.add_parser(
        "ner-audit", help="NER prompt memorization audit of a token-classification model (Xia et al. 2025)",
        description="Fill prompts with in-sample and out-of-sample entity names, read the model's entity "
                    "confidence and report each prompt's M-MEM (AUC), best/worst prompts, baselines, ensembles and "
                    "token removal. Without --model, builds and audits the WNUT-16 demo (two taggers on swapped "
                    "halves, each the other's control).")
    p.add_argument("--model", metavar="URI", help="models:/name@alias, models:/name/version, runs:/..., or a folder "
                                                  "(default: the demo's wnut-ner-a and wnut-ner-b)")
    p.add_argument("--names", metavar="PATH", help="names table (.csv/.jsonl/.parquet): name, entity_type, is_member "
                                                   "(1 = in the training data), optional split (dev/test)")
    p.add_argument("--label-column", help="membership column of --names (default: is_member)")
    p.add_argument("--prompts", metavar="PATH", help="prompt table: prompt, entity_type, sentence_type "
                                                     "(default: the shipped set)")
    p.add_argument("--handwritten-prompts", metavar="PATH", help="the baselines' prompts (default: shipped)")
    p.add_argument("--entity-types", help="comma-separated types (default: every type of the names table)")
    p.add_argument("--dev-fraction", type=float, default=0.5,
                   help="share of names per type and class used for dev when --names has no split (default 0.5)")
    p.add_argument("--subword", choices=("first", "mean"), default="first",
                   help="tokens read per name: the first subword of each word, or every subword (default first)")
    p.add_argument("--seed", type=lambda t: int(float(t)), default=0,
                   help="seed of the dev/test split, Mix-PT and the bootstrap (default 0)")
    p.add_argument("--token-budget", type=_opt_int,
                   help="padded tokens per forward pass (default 4096 on CPU, 32768 on CUDA)")
    p.add_argument("--batch-size", type=_opt_int, help="sentences per forward pass (instead of --token-budget)")
    p.add_argument("--bootstrap-rounds", type=lambda t: int(float(t)), default=1000,
                   help="bootstrap resamples of the M-MEM intervals over names (default 1000; 0 = none)")
    p.add_argument("--fprs", default="0.1,0.01",
                   help="FPRs of the TPR metrics, threshold from the dev out-of-sample names (default 0.1,0.01)")
    p.add_argument("--no-token-removal", action="store_true", help="skip the greedy token removal")
    p.add_argument("--log-texts", default="false", help="true: write raw names into tables/ner_names.csv")
    p.add_argument("--log-samples", default="false",
                   help="true: write each name's confidences into tables/ner_names.csv (default false: anyone who "
                        "can read the run and load the model could recompute them and find a name's label)")
    p.add_argument("--cache-dir", help="entity-confidence cache directory (default ~/.cache/mlflow_mia)")
    p.add_argument("--device", help="torch device, e.g. cpu or cuda:0 (default: CUDA when available)")
    p.add_argument("--demo-size", choices=("default", "small"), default="default",
                   help="demo taggers without --model: MiniLM-L6 (default) or a tiny scratch BERT (small)")
    p.add_argument("--tracking-uri", metavar="URI", help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI)")
    p.add_argument("--experiment", metavar="NAME", help="MLflow experiment of the audit run")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    return p


def _opt_int(text: str):
    """An int, or None for an empty string (MLproject passes unset parameters as "")."""
    return int(float(text)) if text.strip() else None


def _config(args):
    from mlflow_mia.audit_ner import NerAuditConfig

    types = _blank(args.entity_types)
    return NerAuditConfig(
        entity_types=tuple(t.strip() for t in types.split(",") if t.strip()) if types else None,
        dev_fraction=args.dev_fraction, subword=args.subword, seed=args.seed, bootstrap_rounds=args.bootstrap_rounds,
        fprs=tuple(float(a) for a in args.fprs.split(",") if a.strip()), token_removal=not args.no_token_removal,
        token_budget=args.token_budget, batch_size=args.batch_size)


def _audit_one(model_uri, names, args, *, run_name: str, nested: bool, title: str):
    import mlflow

    from mlflow_mia.audit_ner import ner_audit
    from mlflow_mia.integrations.ner_logging import log_ner_audit
    from mlflow_mia.integrations.ner_models import resolve_token_classifier, tagger_params
    from mlflow_mia.signals.entity_confidence import ConfidenceCache

    tagger = resolve_token_classifier(model_uri)
    result = ner_audit(tagger.lm, names, prompts=_blank(args.prompts), handwritten=_blank(args.handwritten_prompts),
                       config=_config(args), cache=ConfidenceCache(_blank(args.cache_dir)),
                       device=_blank(args.device), progress=not args.quiet)
    with mlflow.start_run(run_name=run_name, nested=nested) as run:
        log_ner_audit(result, run_id=run.info.run_id, log_texts=str(args.log_texts).lower() == "true",
                      params=tagger_params(tagger), title=title,
                      log_samples=str(args.log_samples).lower() == "true")
    return result, run.info.run_id


def _print(result, label: str) -> None:
    print(f"{label} ({result.model_id}):")
    for kind in result.entity_types:
        g = lambda k: result.metrics.get(f"ner/{kind}/{k}", float("nan"))  # noqa: E731
        print(f"  {kind:<10} best {g('best_prompt_mmem'):.3f}  worst {g('worst_prompt_mmem'):.3f}  "
              f"gap {100 * g('prompt_gap'):.1f} pp  sigma {100 * g('prompt_std'):.2f} pp  "
              f"AVG-C {g('avg_c_mmem'):.3f}  -PT {g('no_pt_mmem'):.3f}")


def _demo(args):
    """Build (or find) the WNUT demo and audit both taggers; log the comparison to a parent run."""
    import mlflow

    from mlflow_mia.audit_ner import compare_models
    from mlflow_mia.demo.wnut import build_wnut_demo
    from mlflow_mia.integrations.logging import _json
    from mlflow_mia.ner.names import read_private_table
    from mlflow_mia.report_ner import render_ner_report

    project_run = os.environ.pop("MLFLOW_RUN_ID", None)
    try:
        demo = build_wnut_demo(size=args.demo_size, progress=not args.quiet)
    except ModuleNotFoundError as exc:
        raise ValueError(f"the NER demo needs {exc.name!r}: pip install 'mlflow-mia[demo]'") from None
    finally:
        if project_run is not None:
            os.environ["MLFLOW_RUN_ID"] = project_run
    names_a = read_private_table(demo.names_path)
    names_b = names_a.assign(is_member=1 - names_a["is_member"])
    with mlflow.start_run(run_name=f"ner-audit wnut-{args.demo_size}") as parent:
        results = {}
        for label, uri, names in (("A", demo.model_a_uri, names_a), ("B", demo.model_b_uri, names_b)):
            results[label], _ = _audit_one(uri, names, args, run_name=f"ner-audit {uri}", nested=True,
                                           title=f"Model {label}: {uri}")
            _print(results[label], f"model {label}")
        metrics, taus = compare_models(results, controls={"A": "B"})
        mlflow.log_metrics(metrics)
        mlflow.log_params({"ner.model_a": demo.model_a_uri, "ner.model_b": demo.model_b_uri,
                           "ner.entity_types": ",".join(demo.entity_types)})
        mlflow.log_text(taus.to_csv(index=False), "tables/ner_kendall_tau_models.csv")
        report = ["# NER prompt memorization audit: WNUT-16 demo, two taggers on swapped halves", "",
                  "Model A's in-sample names are model B's out-of-sample names and the other way round; the mean "
                  "of the two (controlled) cancels a name set that is merely easier to tag.", "",
                  "| type | best A | best B | controlled best | AVG-C A | AVG-C B | controlled AVG-C |",
                  "|---|---|---|---|---|---|---|"]
        for kind in results["A"].entity_types:
            g = lambda r, k: r.metrics.get(f"ner/{kind}/{k}", float("nan"))  # noqa: E731
            report.append(f"| {kind} | {g(results['A'], 'best_prompt_mmem'):.3f} | "
                          f"{g(results['B'], 'best_prompt_mmem'):.3f} | "
                          f"{metrics[f'ner/{kind}/controlled/best_prompt_mmem']:.3f} | "
                          f"{g(results['A'], 'avg_c_mmem'):.3f} | {g(results['B'], 'avg_c_mmem'):.3f} | "
                          f"{metrics[f'ner/{kind}/controlled/avg_c_mmem']:.3f} |")
        report += ["", render_ner_report(results["A"], title=f"Model A ({demo.model_a_uri})"),
                   render_ner_report(results["B"], title=f"Model B ({demo.model_b_uri})")]
        mlflow.log_text("\n".join(report), "report.md")
        mlflow.log_text(_json(metrics), "ner_comparison.json")
        print("controlled (mean of A and B): " + ", ".join(
            f"{k.split('/')[1]} {v:.3f}" for k, v in metrics.items() if k.endswith("controlled/best_prompt_mmem")))
        print(f"run {parent.info.run_id} at {mlflow.get_tracking_uri()}")
    return 0


def cmd_ner_audit(args) -> int:
    """Run ``mlflow-mia ner-audit``; returns the exit code (0 ok; errors raise ValueError)."""
    import mlflow

    from mlflow_mia.ner.names import read_private_table

    if _blank(args.tracking_uri):
        mlflow.set_tracking_uri(args.tracking_uri)
    if _blank(args.experiment) and not os.environ.get("MLFLOW_RUN_ID"):
        mlflow.set_experiment(args.experiment)
    model, names = _blank(args.model), _blank(args.names)
    if model is None and names is None:
        return _demo(args)
    if model is None or names is None:
        raise ValueError("give both --model and --names (or neither, to audit the WNUT-16 demo)")
    table = read_private_table(names)
    label = _blank(args.label_column)
    if label and label != "is_member":
        if label not in table.columns:
            raise ValueError(f"--label-column {label!r} is not a column of {names}: {list(table.columns)}")
        table = table.rename(columns={label: "is_member"})
    result, run_id = _audit_one(model, table, args, run_name=f"ner-audit {model}", nested=False, title=None)
    _print(result, "model")
    print(f"run {run_id} at {mlflow.get_tracking_uri()}")
    return 0
