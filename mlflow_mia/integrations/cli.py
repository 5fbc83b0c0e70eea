"""The ``mlflow-mia`` command line: ``audit``, ``compare``, ``build-demo``, ``ner-audit`` and ``analyze``.

Each subcommand turns its options into the flat ``evaluator_config["mia"]`` keys
(:mod:`mlflow_mia.integrations.config`), so the CLI, the MLproject entry points
and the evaluator plugin share one parser and one logging path.

Exit codes: 0 success (gate passed or no gate), 1 the audit broke (a bug or an
environment fault such as a tracking server that cannot be reached), 2 a usage or
input error (bad option, missing column, missing population set), 3 the release
gate failed.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from mlflow_mia.integrations.session import build_demo_for_audit, config_and_inputs, mlflow_run, print_result
from mlflow_mia.integrations.session import setup_tracking as _setup_tracking
from mlflow_mia.integrations.values import blank as _blank
from mlflow_mia.integrations.values import parse_bool, parse_float, parse_int

__all__ = ["main", "build_parser"]

log = logging.getLogger(__name__)

# 1 is what Python exits with on an uncaught error, so a failed gate has its own code.
EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_GATE_FAILED = 0, 1, 2, 3

_EPILOG = """\
examples:
  mlflow-mia audit --demo-size small
  mlflow-mia audit --target models:/bbc-target@candidate --reference models:/bbc-reference@champion \\
      --data pool.csv --population population.csv --group-column article_id --max-tpr-at-fpr 0.01:0.05
  mlflow-mia compare --models bbc-target --aliases champion,candidate --reference models:/bbc-reference@champion \\
      --data pool.csv --population population.csv
  mlflow-mia compare --reference models:/bbc-reference@champion,models:/bbc-reference-ood@champion \\
      --attacks loss,likelihood_ratio,neighbourhood --neighbour-generator models:/bbc-reference-ood@champion

exit codes: 0 = done (gate passed or none set), 1 = the audit broke (a bug or an environment fault),
2 = usage or input error, 3 = release gate failed (the model leaks more than its budget).
"""


def _attack_names() -> str:
    try:
        from mlflow_mia.attacks import ATTACKS

        return ", ".join(sorted(ATTACKS))
    except Exception:  # noqa: BLE001 - help text must render even if an attack module is broken
        return "see mlflow_mia.attacks.ATTACKS"


def _arg_type(read, expected: str, name: str):
    """An argparse type from a reader of :mod:`mlflow_mia.integrations.values`; '' (an unset MLproject
    parameter) is None for numbers."""

    def convert(text: str):
        if not text.strip() and read is not parse_bool:
            return None
        try:
            return read(text, "value")
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None

    convert.__name__ = name
    return convert


_INT, _FLOAT = _arg_type(parse_int, "an integer", "int"), _arg_type(parse_float, "a number", "float")
_flag = _arg_type(parse_bool, "true or false", "bool")


def _audit_options(parser: argparse.ArgumentParser, *, several_references: bool = False) -> None:
    """Options shared by ``audit`` and ``compare`` (defaults None = library default or demo value)."""
    models = parser.add_argument_group("models")
    models.add_argument("--reference", metavar="URI[,URI]" if several_references else "URI",
                        help="reference model: models:/name/version, models:/name@alias, runs:/<run_id>/<path> or "
                             "a local folder. Needed by likelihood_ratio: a model trained on similar data, disjoint "
                             "from the target's training data (demo: models:/bbc-reference@champion)"
                             + ("; comma-separated for several: every version is audited against each, one nested "
                                "run per pair (e.g. an in-domain and an out-of-domain reference)"
                                if several_references else ""))
    data = parser.add_argument_group("data")
    data.add_argument("--data", metavar="PATH",
                      help="target pool (.csv, .jsonl, .json or .parquet): one text per row with a membership "
                           "label, 1 = in the target's training data, 0 = not (default: the BBC demo's pool, built "
                           "on first use, with its population, reference and columns)")
    data.add_argument("--population", metavar="PATH",
                      help="population set (same formats): texts from the same distribution as the members, "
                           "disjoint from the pool; only used to set thresholds. Required with --data")
    data.add_argument("--text-column", metavar="NAME", help="text column of the pool (default: text)")
    data.add_argument("--label-column", metavar="NAME", help="membership label column (default: is_member)")
    data.add_argument("--id-column", metavar="NAME",
                      help="sample id column written to the per-sample table (default: row number)")
    data.add_argument("--group-column", metavar="NAME",
                      help="user id column (e.g. a patient or an article); adds user-level metrics user/<attack>/... "
                           "(demo: article_id)")
    data.add_argument("--population-text-column", metavar="NAME",
                      help="text column of the population (default: --text-column)")
    data.add_argument("--population-group-column", metavar="NAME",
                      help="user id column of the population (default: --group-column); needed for user-level "
                           "thresholds")
    data.add_argument("--demo-size", choices=("default", "small"), default="default",
                      help="size of the built-in BBC News demo used when no model/data is given; 'small' "
                           "trains in about a minute (default: default)")
    _attack_and_metric_options(parser)
    _output_options(parser)


def _attack_and_metric_options(parser: argparse.ArgumentParser) -> None:
    """Attack, signal, metric and release-gate options of ``audit`` and ``compare``."""
    attack = parser.add_argument_group("attacks and signals")
    attack.add_argument("--attacks", metavar="A,B",
                        help=f"comma-separated attacks (default: loss,likelihood_ratio; registered: {_attack_names()})")
    attack.add_argument("--signal", choices=("energy", "pll"),
                        help="energy: masked energy over --num-masks random masks (default); pll: "
                             "pseudo-log-likelihood, every token masked once")
    attack.add_argument("--num-masks", type=_INT, metavar="K",
                        help="random masks per text for the energy (default 10)")
    attack.add_argument("--mask-rate", type=_FLOAT, metavar="R",
                        help="fraction of tokens masked per mask (default 0.15)")
    attack.add_argument("--seed", type=_INT, help="seed of the masks and of the bootstrap (default 0)")
    attack.add_argument("--max-length", type=_INT, metavar="N",
                        help="token limit per text including special tokens (default: the model's); longer texts "
                             "are truncated and counted")
    attack.add_argument("--token-budget", type=_INT, metavar="N",
                        help="padded tokens per forward pass, batch size x length (default: 1024 on CPU, "
                             "16384 on CUDA; lower it if memory runs out)")
    attack.add_argument("--num-neighbours", type=_INT, metavar="N",
                        help="neighbours per text for the neighbourhood attack (default 25)")
    attack.add_argument("--neighbour-generator", metavar="URI",
                        help="model proposing neighbour words (default: the reference model)")
    attack.add_argument("--allow-tokenizer-mismatch", action="store_true",
                        help="accept a reference whose tokenizer differs from the target's (default: an error); "
                             "requires --signal pll, whose per-token energies are roughly comparable")
    metric = parser.add_argument_group("metrics and release gate")
    metric.add_argument("--fprs", metavar="A,B",
                        help="false-positive rates at which TPR, precision and recall are reported "
                             "(default 0.1,0.01,0.001; the population needs at least 1/min(fprs) texts)")
    metric.add_argument("--bootstrap-rounds", type=_INT, metavar="N",
                        help="bootstrap resamples for the confidence intervals (default 1000; 0 = none)")
    metric.add_argument("--delta", type=_FLOAT, metavar="D",
                        help="delta of the (eps, delta)-DP guarantee behind the empirical epsilon lower bound "
                             "(default 1e-5)")
    metric.add_argument("--max-tpr-at-fpr", action="append", metavar="ALPHA:MAX",
                        help="release gate, repeatable (commas also separate budgets): fail when any attack's TPR "
                             "at FPR ALPHA, at sample or user level, exceeds MAX; e.g. 0.01:0.05. Tags the run "
                             "mia.gate=pass|fail and exits with 3 on fail")


def _output_options(parser: argparse.ArgumentParser) -> None:
    """Logging and execution options of ``audit`` and ``compare``."""
    out = parser.add_argument_group("logging")
    out.add_argument("--log-texts", nargs="?", const=True, default=False, type=_flag, metavar="BOOL",
                     help="write raw texts into tables/samples.csv and tables/riskiest.csv; '--log-texts' alone "
                          "or '--log-texts true' (default: false, only ids and keyed hashes are logged)")
    out.add_argument("--log-samples", nargs="?", const=True, default=False, type=_flag, metavar="BOOL",
                     help="log per-sample scores, flags and token counts in tables/samples.csv and the riskiest "
                          "records' scores; '--log-samples' alone or '--log-samples true' (default: false: anyone "
                          "who can read the run and load the model could recompute a text's score and find its "
                          "label there)")
    out.add_argument("--hash-key-file", metavar="PATH",
                     help="file with your secret key (32+ bytes) for the HMAC-SHA256 text and group hashes in the "
                          "logged tables; never logged (default: $MLFLOW_MIA_HASH_KEY, else a random key that is "
                          "not kept, so nobody can look a sample up); see mlflow_mia.lookup_hash")
    out.add_argument("--no-tag-model-version", action="store_true",
                     help="do not tag the audited registry version with mia.* headline numbers (a failing gate "
                          "verdict is still written)")
    out.add_argument("--clear-gate-fail", action="store_true",
                     help="let a passing gate replace an earlier mia.gate=fail on the registry version (default: "
                          "a fail stays)")
    out.add_argument("--experiment", metavar="NAME",
                     help="MLflow experiment (default: $MLFLOW_EXPERIMENT_NAME, else mlflow-mia-demo for demo "
                          "audits, else the active one; ignored under mlflow run)")
    out.add_argument("--run-name", metavar="NAME", help="name of the MLflow run")
    out.add_argument("--tracking-uri", metavar="URI",
                     help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db)")
    run = parser.add_argument_group("execution")
    run.add_argument("--cache-dir", metavar="DIR",
                     help="signal cache directory (default: $MLFLOW_MIA_CACHE or ~/.cache/mlflow_mia); re-runs and "
                          "a reference shared by several targets cost nothing")
    run.add_argument("--trust-remote-code", action="store_true",
                     help="let a model whose classes are not part of transformers run the Python code shipped with "
                          "it (default: such a model is refused; audit only models whose authors you trust)")
    run.add_argument("--device", help="torch device, e.g. cpu or cuda:0 (default: CUDA when available)")
    run.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    run.add_argument("--engine", choices=("local", "spark"),
                     help="where the signals are computed: local (default) or spark (pip install 'mlflow-mia[spark]')")
    run.add_argument("--spark-master", metavar="URL", help="Spark master of --engine spark, e.g. local[2]")
    run.add_argument("--spark-store", metavar="PATH",
                     help="Parquet signal store of --engine spark; a re-run computes only the missing texts")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``mlflow-mia`` (also used to render ``--help``)."""
    parser = argparse.ArgumentParser(
        prog="mlflow-mia", formatter_class=argparse.RawDescriptionHelpFormatter, epilog=_EPILOG,
        description="Membership inference audits of masked language models, logged to MLflow.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress messages (INFO level)")
    sub = parser.add_subparsers(dest="command", metavar="{audit,compare,build-demo,ner-audit,analyze}")
    sub.required = True

    audit = sub.add_parser(
        "audit", formatter_class=argparse.RawDescriptionHelpFormatter, epilog=_EPILOG,
        help="audit one model and log the result to an MLflow run",
        description="Audit one masked LM for membership leakage and log metrics, figures, tables, a report and "
                    "registry tags to one MLflow run. Without --target, audits the built-in BBC News demo "
                    "(trained and registered on first use).")
    audit.add_argument("--target", metavar="URI",
                       help="model under audit: models:/name/version, models:/name@alias, runs:/<run_id>/<path> or "
                            "a local folder (default: the demo's models:/bbc-target@candidate; required with --data)")
    _audit_options(audit)

    compare = sub.add_parser(
        "compare", formatter_class=argparse.RawDescriptionHelpFormatter, epilog=_EPILOG,
        help="audit several registry versions against one reference and compare them",
        description="Audit every version (or the given aliases) of one or more registered models against the same "
                    "reference, one nested run per version, and log a comparison table (attack x model version) "
                    "and plots to the parent run. The reference signals are computed once (signal cache).")
    compare.add_argument("--models", metavar="NAME[,NAME]",
                         help="registered model name(s) to compare (default: the demo's bbc-target; required with "
                              "--data)")
    compare.add_argument("--aliases", metavar="A[,B]",
                         help="aliases to audit, e.g. champion,candidate (default: every version)")
    _audit_options(compare, several_references=True)

    demo = sub.add_parser("build-demo", help="train and register the BBC News demo models",
                          description="Build the real-data demo: BBC News sentences, a target model fine-tuned on "
                                      "the members, a reference model on disjoint articles; registered as "
                                      "bbc-target@candidate and bbc-reference@champion. Skips training when they "
                                      "are already registered.")
    demo.add_argument("--size", choices=("default", "small"), default="default",
                      help="'small' trains in about a minute, for tests (default: default)")
    demo.add_argument("--force", action="store_true", help="retrain and register new versions even if present")
    demo.add_argument("--tracking-uri", metavar="URI", help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI)")
    demo.add_argument("--data-dir", metavar="DIR",
                      help="folder for pool.jsonl and population.jsonl (default ./mlflow_mia_demo/<size>)")
    demo.add_argument("--threads", type=_INT, metavar="N",
                      help="torch CPU threads for training (default: torch's choice; 1 on busy machines)")
    demo.add_argument("--json", action="store_true", help="print the demo's models and files as JSON")
    demo.add_argument("-q", "--quiet", "--no-progress", action="store_true", help="no progress bars")
    from mlflow_mia.integrations.analyze_cli import add_analyze_parser
    from mlflow_mia.integrations.ner_cli import add_ner_parser

    add_ner_parser(sub)
    add_analyze_parser(sub, _flag)
    return parser


def _gate_spec(values):
    if not values:
        return None
    budgets = [b for v in values if _blank(v) for b in str(v).split(",") if b.strip()]
    return budgets or None


def _flat_config(args, *, demo=None) -> dict:
    """CLI options -> flat ``evaluator_config["mia"]`` keys (None = not given)."""
    columns = {"text_column": getattr(demo, "text_column", None), "label_column": getattr(demo, "label_column", None),
               "id_column": getattr(demo, "id_column", None), "group_column": getattr(demo, "group_column", None)}
    flat = {
        "reference_model": _blank(args.reference) or (demo.reference_uri if demo else None),
        "population_data": _blank(args.population) or (str(demo.population_path) if demo else None),
        "text_column": _blank(args.text_column) or columns["text_column"] or "text",
        "label_column": _blank(args.label_column) or columns["label_column"] or "is_member",
        "id_column": _blank(args.id_column) or columns["id_column"],
        "group_column": _blank(args.group_column) or columns["group_column"],
        "population_text_column": _blank(args.population_text_column),
        "population_group_column": _blank(args.population_group_column),
        "attacks": _blank(args.attacks), "signal": _blank(args.signal), "num_masks": args.num_masks,
        "mask_rate": args.mask_rate, "seed": args.seed, "max_length": args.max_length,
        "token_budget": args.token_budget, "num_neighbours": args.num_neighbours,
        "neighbour_generator": _blank(args.neighbour_generator), "fprs": _blank(args.fprs),
        "bootstrap_rounds": args.bootstrap_rounds, "delta": args.delta, "max_tpr_at_fpr": _gate_spec(args.max_tpr_at_fpr),
        "log_texts": bool(args.log_texts), "log_samples": bool(args.log_samples),
        "tag_model_version": not args.no_tag_model_version,
        "cache_dir": _blank(args.cache_dir), "device": _blank(args.device), "progress": not args.quiet,
        "trust_remote_code": True if args.trust_remote_code else None,
        "clear_gate_fail": True if args.clear_gate_fail else None,
        "hash_key_file": _blank(args.hash_key_file),
        "allow_tokenizer_mismatch": bool(args.allow_tokenizer_mismatch),
        "engine": _blank(args.engine), "spark_master": _blank(args.spark_master),
        "spark_store": _blank(args.spark_store),
    }
    return {k: v for k, v in flat.items() if v is not None}


def _cmd_audit(args) -> int:
    from mlflow_mia.integrations.evaluator import audit_and_log
    from mlflow_mia.integrations.models import resolve_model

    target_uri, data, demo = _blank(args.target), _blank(args.data), None
    if data is None:  # the demo's data (and models, unless given)
        demo = build_demo_for_audit(args.demo_size, progress=not args.quiet, args=args)
        target_uri, data = target_uri or demo.target_uri, str(demo.pool_path)
    elif target_uri is None:
        raise ValueError("--data was given without --target: name the model to audit")
    config, options, pool, population = config_and_inputs(_flat_config(args, demo=demo), data, demo)
    target = resolve_model(target_uri, role="target", trust_remote_code=options.trust_remote_code)
    reference = resolve_model(options.reference_model, role="reference",
                              trust_remote_code=options.trust_remote_code) if options.reference_model else None
    params = {"pool_source": os.path.basename(str(data)),
              "population_source": os.path.basename(str(options.population_data))}
    with mlflow_run(_blank(args.run_name) or f"audit {target.resolved_uri}") as run:
        result, gate, _ = audit_and_log(target, pool, population, config, options, reference=reference,
                                        run_id=run.info.run_id, extra_params=params)
    print(f"audit of {target.resolved_uri}" + (f" against {reference.resolved_uri}" if reference else ""))
    print_result(result, run, gate)
    return EXIT_GATE_FAILED if gate is not None and not gate.passed else EXIT_OK


def _cmd_compare(args) -> int:
    from mlflow_mia.integrations.compare import compare

    return EXIT_OK if compare(args, _flat_config) else EXIT_GATE_FAILED


def _cmd_build_demo(args) -> int:
    import json

    import mlflow

    uri = _blank(args.tracking_uri)
    if uri:
        mlflow.set_tracking_uri(uri)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    spec = build_demo_for_audit(args.size, progress=not args.quiet, force=args.force, isolate=False,
                                data_dir=_blank(args.data_dir), num_threads=args.threads)
    if args.json:
        print(json.dumps(spec.to_dict(), indent=2))
        return EXIT_OK
    print(f"demo ({args.size}) ready at {mlflow.get_tracking_uri()}:")
    for field in ("target_uri", "reference_uri", "ood_reference_uri", "base_uri", "pool_path", "population_path"):
        print(f"  {field:<18} {getattr(spec, field, None)}")
    return EXIT_OK


def main(argv=None) -> int:
    """Run ``mlflow-mia``; returns the exit code (0 ok, 1 audit broke, 2 usage or input error, 3 gate failed)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return int(exc.code or 0)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    import mlflow

    from mlflow_mia.signals.cache import CacheCorruptError

    try:
        if args.command != "build-demo":
            _setup_tracking(args)
        if args.command == "audit":
            return _cmd_audit(args)
        if args.command == "compare":
            return _cmd_compare(args)
        if args.command == "ner-audit":
            from mlflow_mia.integrations.ner_cli import cmd_ner_audit

            return cmd_ner_audit(args)
        if args.command == "analyze":
            from mlflow_mia.integrations.analyze_cli import cmd_analyze

            return cmd_analyze(args)
        return _cmd_build_demo(args)
    except (ValueError, FileNotFoundError, CacheCorruptError) as exc:
        print(f"mlflow-mia {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except mlflow.exceptions.MlflowException as exc:
        from mlflow_mia.integrations.model_files import tracking_unreachable

        if tracking_unreachable(exc):  # the server is down: an environment fault, not the user's input
            print(f"mlflow-mia {args.command}: error: the tracking server at {mlflow.get_tracking_uri()} cannot be "
                  f"reached ({exc.message}); start it or check --tracking-uri", file=sys.stderr)
            return EXIT_ERROR
        print(f"mlflow-mia {args.command}: error: {exc.message}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
