"""The ``mlflow-mia`` command line: ``audit``, ``compare`` and ``build-demo``.

Each subcommand turns its options into the flat ``evaluator_config["mia"]`` keys
(:mod:`mlflow_mia.integrations.config`), so the CLI, the MLproject entry points
and the evaluator plugin share one parser and one logging path.

Exit codes: 0 success (gate passed or no gate), 1 the release gate failed,
2 a usage or input error (bad option, missing column, missing population set).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys

__all__ = ["main", "build_parser"]

log = logging.getLogger(__name__)

EXIT_OK, EXIT_GATE_FAILED, EXIT_USAGE = 0, 1, 2

_EPILOG = """\
examples:
  mlflow-mia audit --demo-size small
  mlflow-mia audit --target models:/bbc-target@candidate --reference models:/bbc-reference@champion \\
      --data pool.csv --population population.csv --group-column article_id --max-tpr-at-fpr 0.01:0.05
  mlflow-mia compare --models bbc-target --aliases champion,candidate --reference models:/bbc-reference@champion \\
      --data pool.csv --population population.csv
  mlflow-mia compare --reference models:/bbc-reference@champion,models:/bbc-reference-ood@champion \\
      --attacks loss,likelihood_ratio,neighbourhood --neighbour-generator models:/bbc-reference-ood@champion

exit codes: 0 = done (gate passed or none set), 1 = release gate failed, 2 = usage or input error.
"""


def _attack_names() -> str:
    try:
        from mlflow_mia.attacks import ATTACKS

        return ", ".join(sorted(ATTACKS))
    except Exception:  # noqa: BLE001 - help text must render even if an attack module is broken
        return "see mlflow_mia.attacks.ATTACKS"


def _number(cast):
    """An argparse type that reads '' (an unset MLproject parameter) as None."""

    def read(text: str):
        if not text.strip():
            return None
        try:
            value = float(text) if cast is int else cast(text)
            if cast is int:
                if not value.is_integer():
                    raise ValueError(text)
                value = int(value)
            return value
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {'an integer' if cast is int else 'a number'}, "
                                             f"got {text!r}") from None

    read.__name__ = cast.__name__
    return read


def _flag(text: str) -> bool:
    value = text.strip().lower()
    if value in ("", "false", "0", "no"):
        return False
    if value in ("true", "1", "yes"):
        return True
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


_INT, _FLOAT = _number(int), _number(float)


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
                      help="user / document id column; adds user-level metrics user/<attack>/... "
                           "(demo: article_id)")
    data.add_argument("--population-text-column", metavar="NAME",
                      help="text column of the population (default: --text-column)")
    data.add_argument("--population-group-column", metavar="NAME",
                      help="group column of the population (default: --group-column); needed for user-level "
                           "thresholds")
    data.add_argument("--demo-size", choices=("default", "small"), default="default",
                      help="size of the built-in BBC News demo used when no model/data is given; 'small' "
                           "trains in about a minute (default: default)")
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
    metric = parser.add_argument_group("metrics and release gate")
    metric.add_argument("--fprs", metavar="A,B",
                        help="false-positive rates at which TPR, precision and recall are reported "
                             "(default 0.1,0.01,0.001; the population needs at least 1/min(fprs) texts)")
    metric.add_argument("--bootstrap-rounds", type=_INT, metavar="N",
                        help="bootstrap resamples for the confidence intervals (default 1000; 0 = none)")
    metric.add_argument("--max-tpr-at-fpr", action="append", metavar="ALPHA:MAX",
                        help="release gate, repeatable (commas also separate budgets): fail when any attack's TPR "
                             "at FPR ALPHA, at sample or user level, exceeds MAX; e.g. 0.01:0.05. Tags the run "
                             "mia.gate=pass|fail and exits with 1 on fail")
    out = parser.add_argument_group("logging")
    out.add_argument("--log-texts", nargs="?", const=True, default=False, type=_flag, metavar="BOOL",
                     help="write raw texts into tables/samples.csv and tables/riskiest.csv; '--log-texts' alone "
                          "or '--log-texts true' (default: false, only ids and sha256 hashes are logged)")
    out.add_argument("--no-tag-model-version", action="store_true",
                     help="do not tag the audited registry version with mia.* headline numbers")
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
    run.add_argument("--device", help="torch device, e.g. cpu or cuda:0 (default: CUDA when available)")
    run.add_argument("-q", "--quiet", action="store_true", help="no progress bars")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``mlflow-mia`` (also used to render ``--help``)."""
    parser = argparse.ArgumentParser(
        prog="mlflow-mia", formatter_class=argparse.RawDescriptionHelpFormatter, epilog=_EPILOG,
        description="Membership inference audits of masked language models, logged to MLflow.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress messages (INFO level)")
    sub = parser.add_subparsers(dest="command", metavar="{audit,compare,build-demo,ner-audit}")
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
    demo.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    from mlflow_mia.integrations.ner_cli import add_ner_parser

    add_ner_parser(sub)
    return parser


def _blank(value):
    """MLproject passes empty strings for unset parameters: treat them as not given."""
    if value is None:
        return None
    if isinstance(value, str) and not value.strip():
        return None
    return value


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
        "bootstrap_rounds": args.bootstrap_rounds, "max_tpr_at_fpr": _gate_spec(args.max_tpr_at_fpr),
        "log_texts": bool(args.log_texts), "tag_model_version": not args.no_tag_model_version,
        "cache_dir": _blank(args.cache_dir), "device": _blank(args.device), "progress": not args.quiet,
    }
    return {k: v for k, v in flat.items() if v is not None}


def _build_demo(size: str, *, progress: bool, force: bool = False, args=None, isolate: bool = True):
    """``build_demo`` in its own run and experiment, then back to the audit's experiment.

    Under ``mlflow run`` the project run is in ``MLFLOW_RUN_ID``; the demo's training run
    must not resume it, so the variable is hidden while the demo builds. Without
    ``--experiment`` or ``$MLFLOW_EXPERIMENT_*``, the audit joins the demo's experiment
    (``mlflow-mia-demo``).
    ``isolate=False`` (``build-demo``) lets the build record into the project run.
    """
    import mlflow

    try:
        from mlflow_mia.demo.build import build_demo
    except ImportError as exc:
        raise ValueError(f"the built-in demo is not available ({exc}); install the demo extras with "
                         "pip install 'mlflow-mia[demo]' or give --target/--data/--population") from None
    if not isolate:
        try:
            return build_demo(size=size, force=force, progress=progress)
        except ModuleNotFoundError as exc:
            raise ValueError(f"the demo needs {exc.name!r}: pip install 'mlflow-mia[demo]'") from None
    project_run = os.environ.pop("MLFLOW_RUN_ID", None)
    try:
        return build_demo(size=size, force=force, progress=progress)
    except ModuleNotFoundError as exc:
        raise ValueError(f"the demo needs {exc.name!r}: pip install 'mlflow-mia[demo]'") from None
    finally:
        if project_run is not None:
            os.environ["MLFLOW_RUN_ID"] = project_run
        # build_demo switches to its own experiment; go back to the one asked for, if any.
        if args is not None and _blank(getattr(args, "experiment", None)) and project_run is None:
            mlflow.set_experiment(_blank(args.experiment))
        elif os.environ.get("MLFLOW_EXPERIMENT_ID"):
            mlflow.set_experiment(experiment_id=os.environ["MLFLOW_EXPERIMENT_ID"])
        elif os.environ.get("MLFLOW_EXPERIMENT_NAME"):
            mlflow.set_experiment(os.environ["MLFLOW_EXPERIMENT_NAME"])
        else:  # next to the demo's build run, whether or not this call built it
            mlflow.set_experiment(getattr(sys.modules.get("mlflow_mia.demo.build"), "EXPERIMENT_NAME",
                                          "mlflow-mia-demo"))


def _setup_tracking(args) -> None:
    import mlflow

    uri = _blank(getattr(args, "tracking_uri", None))
    if uri:
        mlflow.set_tracking_uri(uri)
    experiment = _blank(getattr(args, "experiment", None))
    if experiment and not os.environ.get("MLFLOW_RUN_ID"):
        mlflow.set_experiment(experiment)


@contextlib.contextmanager
def _run(name: str | None, *, nested: bool = False):
    """Start (or, under ``mlflow run``, resume) a run."""
    import mlflow

    if nested:
        with mlflow.start_run(run_name=name, nested=True) as run:
            yield run
        return
    active = mlflow.active_run()
    if active is not None:
        yield active
        return
    with mlflow.start_run(run_name=None if os.environ.get("MLFLOW_RUN_ID") else name) as run:
        yield run


def _config_and_inputs(args, data, demo):
    """Parse the options and load the tables; the demo's default FPRs fit its population size.

    Outside the demo a population too small for an FPR is an error (from ``run_audit``);
    the small demo's 300 population texts cannot resolve FPR 0.001, so when ``--fprs``
    is not given the demo drops the rates it cannot resolve and says so.
    """
    from mlflow_mia.integrations.config import parse_options
    from mlflow_mia.integrations.evaluator import load_inputs
    from mlflow_mia.metrics.thresholds import min_population_size

    flat = _flat_config(args, demo=demo)
    config, options = parse_options(flat)
    pool, population = load_inputs(data, options)
    if demo is not None and "fprs" not in flat:
        fprs = [a for a in config.metrics.fprs if min_population_size(a) <= len(population)]
        if fprs and len(fprs) < len(config.metrics.fprs):
            print(f"demo ({demo.size}): {len(population)} population texts resolve FPRs down to {min(fprs):g}; "
                  f"reporting fprs {','.join(f'{a:g}' for a in fprs)}")
            config, options = parse_options({**flat, "fprs": fprs})
    return config, options, pool, population


def _print_result(result, run, gate) -> None:
    for name, rep in result.attacks.items():
        tprs = ", ".join(f"TPR@{a:g} {v:.3f}" for a, v in rep.tpr_at_fpr.items())
        print(f"  {name:<18} AUC {rep.roc.auc:.3f}  {tprs}")
    print(f"logged to run {run.info.run_id} (experiment {run.info.experiment_id})")
    if gate is not None:
        print(gate.verdict())


def _cmd_audit(args) -> int:
    from mlflow_mia.integrations.evaluator import audit_and_log
    from mlflow_mia.integrations.models import resolve_model

    target_uri, data, demo = _blank(args.target), _blank(args.data), None
    if data is None:  # the demo's data (and models, unless given)
        demo = _build_demo(args.demo_size, progress=not args.quiet, args=args)
        target_uri, data = target_uri or demo.target_uri, str(demo.pool_path)
    elif target_uri is None:
        raise ValueError("--data was given without --target: name the model to audit")
    config, options, pool, population = _config_and_inputs(args, data, demo)
    target = resolve_model(target_uri, role="target")
    reference = resolve_model(options.reference_model, role="reference") if options.reference_model else None
    params = {"pool_source": os.path.basename(str(data)),
              "population_source": os.path.basename(str(options.population_data))}
    with _run(_blank(args.run_name) or f"audit {target.resolved_uri}") as run:
        result, gate, _ = audit_and_log(target, pool, population, config, options, reference=reference,
                                        run_id=run.info.run_id, extra_params=params)
    print(f"audit of {target.resolved_uri}" + (f" against {reference.resolved_uri}" if reference else ""))
    _print_result(result, run, gate)
    return EXIT_GATE_FAILED if gate is not None and not gate.passed else EXIT_OK


def _compare_targets(names, aliases) -> list[tuple[str, str, tuple[str, ...]]]:
    """``[(model name, version, aliases), ...]`` in name order, then ascending version."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    client = MlflowClient()
    out = []
    for name in names:
        if aliases:
            found: dict[str, list[str]] = {}
            for alias in aliases:
                try:
                    mv = client.get_model_version_by_alias(name, alias)
                except MlflowException as exc:
                    raise ValueError(f"model {name!r} has no alias {alias!r}: {exc.message}") from None
                found.setdefault(str(mv.version), []).append(alias)
            versions = {v: tuple(a) for v, a in found.items()}
        else:
            mvs = client.search_model_versions(f"name='{name}'")
            if not mvs:
                raise ValueError(f"registered model {name!r} has no versions at {client.tracking_uri}")
            by_version: dict[str, list[str]] = {str(mv.version): [] for mv in mvs}
            # search_model_versions leaves aliases empty on some stores; the registered model has them all.
            for alias, version in (client.get_registered_model(name).aliases or {}).items():
                by_version.setdefault(str(version), []).append(alias)
            versions = {v: tuple(sorted(a)) for v, a in by_version.items()}
        out += [(name, v, versions[v]) for v in sorted(versions, key=int)]
    return out


def _reference_uris(value) -> list:
    """``compare --reference A,B``: the reference URIs to audit every version against."""
    if value is None:
        return []
    if not isinstance(value, str):
        return [value]
    return [uri.strip() for uri in value.split(",") if uri.strip()]


def _reference_label(reference) -> str:
    """``ref bbc-reference v1 (@champion)``, or the folder / URI of an unregistered reference."""
    if reference is None:
        return "no reference"
    if reference.registered_name:
        alias = reference.requested.rsplit("@", 1)[1] if "@" in reference.requested else None
        return f"ref {reference.registered_name} v{reference.version}" + (f" (@{alias})" if alias else "")
    return f"ref {os.path.basename(str(reference.resolved_uri).rstrip('/'))}"


def _distinct_curves(rocs: dict, scores: dict, *, one_target: bool) -> dict:
    """``{legend label: roc}`` over all attacks, one curve per distinct score vector.

    An attack that does not use the reference (loss, or neighbourhood with a fixed
    generator) scores a target alike in every run; it is drawn once, labelled without
    the reference. With one target the labels leave the target out.
    """
    import numpy as np

    out = {}
    for attack, curves in rocs.items():
        groups: list[tuple[np.ndarray, list[str]]] = []
        for label in curves:
            vector = scores[(attack, label)]
            for seen, labels in groups:
                if np.array_equal(seen, vector, equal_nan=True):
                    labels.append(label)
                    break
            else:
                groups.append((vector, [label]))
        for _, labels in groups:
            target_part, _, reference_part = labels[0].partition(" vs ")
            if one_target:
                who = "" if len(labels) > 1 else reference_part
            else:
                who = target_part if len(labels) > 1 else labels[0]
            out[f"{attack} ({who})" if who else attack] = curves[labels[0]]
    return out


def _label(name: str, version: str, aliases) -> str:
    return f"{name} v{version}" + (f" (@{', @'.join(aliases)})" if aliases else "")


def _comparison_figure(table, *, metric_columns):
    """Grouped bars: one panel per ``(column, title, chance level)``, attacks on the x axis, one bar per version."""
    import numpy as np
    from matplotlib.figure import Figure

    from mlflow_mia.plots import OKABE_ITO

    sample = table[table["level"] == "sample"]
    attacks = list(dict.fromkeys(sample["attack"]))
    models = list(dict.fromkeys(sample["model"]))
    fig = Figure(figsize=(5.2 * len(metric_columns), 4.2), layout="constrained")
    axes = fig.subplots(1, len(metric_columns), squeeze=False)[0]
    width = 0.8 / max(len(models), 1)
    x = np.arange(len(attacks))
    for ax, (column, title, chance) in zip(axes, metric_columns):
        for i, model in enumerate(models):
            rows = sample[sample["model"] == model].set_index("attack")
            values = [float(rows.loc[a, column]) if a in rows.index else np.nan for a in attacks]
            bars = ax.bar(x + (i - (len(models) - 1) / 2) * width, values, width, label=model,
                          color=OKABE_ITO[i % len(OKABE_ITO)])
            ax.bar_label(bars, fmt="%.2f", fontsize=8)
        ax.axhline(chance, color="0.4", linestyle="--", linewidth=1, label="random guessing")
        ax.set_xticks(x, attacks)
        ax.set_ylim(0, 1.08)
        ax.set_title(title)
        ax.set_xlabel("attack")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=min(len(labels), 4), fontsize=9, frameon=False)
    fig.suptitle("Membership leakage by model version (sample level; higher = more leakage)")
    return fig


def _cmd_compare(args) -> int:
    import mlflow
    import pandas as pd

    from mlflow_mia.audit import fmt_alpha
    from mlflow_mia.integrations.evaluator import audit_and_log, resolve_generator
    from mlflow_mia.integrations.logging import audit_params
    from mlflow_mia.integrations.models import resolve_model
    from mlflow_mia.plots import plot_roc_comparison

    names = [n.strip() for n in (_blank(args.models) or "").split(",") if n.strip()]
    aliases = [a.strip().lstrip("@") for a in (_blank(args.aliases) or "").split(",") if a.strip()]
    data, demo = _blank(args.data), None
    if data is None:  # the demo's data (and target model, unless given)
        demo = _build_demo(args.demo_size, progress=not args.quiet, args=args)
        names = names or [demo.target_uri[len("models:/"):].split("@")[0].split("/")[0]]
        data = str(demo.pool_path)
    elif not names:
        raise ValueError("--data was given without --models: name the registered model(s) to compare")
    config, options, pool, population = _config_and_inputs(args, data, demo)
    targets = _compare_targets(names, aliases)
    references = [resolve_model(uri, role="reference") for uri in _reference_uris(options.reference_model)] or [None]
    generator = resolve_generator(config)
    alpha = 0.01 if 0.01 in config.metrics.fprs else min(config.metrics.fprs)
    rows, rocs, scores, gates = [], {}, {}, []
    with _run(_blank(args.run_name) or f"compare {', '.join(names)}") as parent:
        client = mlflow.MlflowClient()
        for name, version, version_aliases in targets:
            target = resolve_model(f"models:/{name}/{version}", role="target")
            for reference in references:
                label = _label(name, version, version_aliases)
                if len(references) > 1:
                    label += f" vs {_reference_label(reference)}"
                with _run(label, nested=True) as child:
                    client.set_tag(child.info.run_id, "mia.compare_parent", parent.info.run_id)
                    result, gate, _ = audit_and_log(
                        target, pool, population, config, options, reference=reference, generator=generator,
                        run_id=child.info.run_id, extra_params={"target_model_aliases": ",".join(version_aliases)})
                print(f"{label}:")
                _print_result(result, child, gate)
                gates.append(gate)
                for level, reports in (("sample", result.attacks), ("user", result.user_attacks)):
                    for attack, rep in reports.items():
                        row = {"model": label, "registered_model": name, "version": int(version),
                               "aliases": ",".join(version_aliases),
                               "reference": reference.resolved_uri if reference is not None else "",
                               "attack": attack, "level": level, "auc": rep.roc.auc,
                               "auc_ci_low": rep.ci.get("auc", (float("nan"),) * 2)[0],
                               "auc_ci_high": rep.ci.get("auc", (float("nan"),) * 2)[1]}
                        row.update({f"tpr_at_fpr_{fmt_alpha(a)}": v for a, v in rep.tpr_at_fpr.items()})
                        row["gate"] = gate.status if gate is not None else ""
                        row["run_id"] = child.info.run_id
                        rows.append(row)
                for attack, rep in result.attacks.items():
                    rocs.setdefault(attack, {})[label] = rep.roc
                    scores[(attack, label)] = result.samples[f"score_{attack}"].to_numpy()
            del target
        table = pd.DataFrame(rows)
        parent_params = {k: v for k, v in audit_params(result, population=population).items()
                         if k != "target_model"}
        parent_params.update({"compared_models": ",".join(names), "compared_aliases": ",".join(aliases) or "all",
                              "compared_versions": ",".join(_label(n, v, a) for n, v, a in targets)[:6000]})
        if len(references) > 1:
            parent_params["compared_references"] = ",".join(r.resolved_uri for r in references)[:6000]
        elif references[0] is not None:
            parent_params.update(references[0].params("reference"))
        mlflow.log_params(parent_params)
        a = fmt_alpha(alpha)
        with _tmp_csv(table) as path:
            mlflow.log_artifact(path, "tables")
        from matplotlib import pyplot as plt

        figures = {"plots/comparison.png": _comparison_figure(
            table, metric_columns=[("auc", "AUC", 0.5), (f"tpr_at_fpr_{a}", f"TPR at FPR {a}", alpha)])}
        for attack, curves in rocs.items():
            figures[f"plots/roc_{attack}_by_version.png"] = plot_roc_comparison(
                curves, log_scale=True, title=f"{attack}: ROC by model version (log-log)")
        distinct = _distinct_curves(rocs, scores, one_target=len(targets) == 1)
        if len(distinct) > 1:
            for log_scale, suffix in ((False, ""), (True, "_log")):
                figures[f"plots/roc_all{suffix}.png"] = plot_roc_comparison(
                    distinct, log_scale=log_scale,
                    title="All attacks and models: ROC" + (" (log-log)" if log_scale else ""))
        for path, fig in figures.items():
            mlflow.log_figure(fig, path)
            plt.close(fig)
        pool_line = (f"{int(result.metrics['n_members'])} members, {int(result.metrics['n_non_members'])} "
                     f"non-members; population {int(result.metrics['n_population'])} texts")
        mlflow.log_text(_comparison_markdown(table, alpha=a, references=references, pool=pool_line), "report.md")
        failed = [g for g in gates if g is not None and not g.passed]
        if any(g is not None for g in gates):
            mlflow.set_tag("mia.gate", "fail" if failed else "pass")
    print(f"comparison logged to run {parent.info.run_id}: tables/comparison.csv, plots/comparison.png")
    sample = table[table["level"] == "sample"][["model", "attack", "auc", f"tpr_at_fpr_{a}"]]
    print(sample.to_string(index=False, float_format="{:.3f}".format))
    if any(g is not None for g in gates):
        print(f"mia.gate={'fail' if failed else 'pass'}: {len(failed)} of {len(gates)} version(s) over budget")
    return EXIT_GATE_FAILED if failed else EXIT_OK


@contextlib.contextmanager
def _tmp_csv(table):
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "comparison.csv")
        table.to_csv(path, index=False)
        yield path


def _comparison_markdown(table, *, alpha: str, references, pool: str) -> str:
    import math

    def ci(r) -> str:
        lo, hi = r["auc_ci_low"], r["auc_ci_high"]
        return "" if math.isnan(lo) or math.isnan(hi) else f" [{lo:.3f}, {hi:.3f}]"

    col = f"tpr_at_fpr_{alpha}"
    gated = "gate" in table and table["gate"].astype(str).str.len().gt(0).any()
    lines = ["# Membership inference: model versions compared", "",
             f"Reference model{'s' if len(references) > 1 else ''}: "
             f"{', '.join(f'`{r.resolved_uri}`' for r in references if r is not None) or 'none'}. "
             f"Audited pool: {pool}. One nested run per "
             f"{'version and reference' if len(references) > 1 else 'version'}, all with the same pool, "
             "population set and settings.", ""]
    for level in ("sample", "user"):
        part = table[table["level"] == level]
        if part.empty:
            continue
        head = f"| Model version | Attack | AUC [CI] | TPR @ FPR {alpha} |" + (" Release gate |" if gated else "")
        lines += [f"## {level.capitalize()} level", "", head, "|---" * (5 if gated else 4) + "|"]
        for _, r in part.iterrows():
            lines.append(f"| {r['model']} | `{r['attack']}` | {r['auc']:.3f}{ci(r)} | {r[col]:.3f} |"
                         + (f" {r['gate'] or '-'} |" if gated else ""))
        lines.append("")
    lines += ["AUC 0.5 means the attack cannot tell members from non-members; higher means more leakage. "
              f"TPR @ FPR {alpha} is the share of members recognised while flagging {alpha} of non-members. "
              "Each version's run holds its full report, figures and per-sample table.", ""]
    return "\n".join(lines)


def _cmd_build_demo(args) -> int:
    import mlflow

    uri = _blank(args.tracking_uri)
    if uri:
        mlflow.set_tracking_uri(uri)
    spec = _build_demo(args.size, progress=not args.quiet, force=args.force, isolate=False)
    print(f"demo ({args.size}) ready at {mlflow.get_tracking_uri()}:")
    for field in ("target_uri", "reference_uri", "ood_reference_uri", "pool_path", "population_path"):
        print(f"  {field:<18} {getattr(spec, field, None)}")
    return EXIT_OK


def main(argv=None) -> int:
    """Run ``mlflow-mia``; returns the exit code (0 ok, 1 gate failed, 2 usage or input error)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return int(exc.code or 0)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    import mlflow

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
        return _cmd_build_demo(args)
    except (ValueError, FileNotFoundError) as exc:
        print(f"mlflow-mia {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except mlflow.exceptions.MlflowException as exc:
        print(f"mlflow-mia {args.command}: error: {exc.message}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
