"""``mlflow-mia compare``: audit several registry versions against one or more references.

The command's shell: it parses the options once (:func:`~mlflow_mia.entrypoints.common.audit_settings`),
expands the demo's references, resolves the models, opens the parent run and prints; the audits and
the comparison are :mod:`mlflow_mia.pipeline.compare`'s (one nested run per (version, reference)
pair; the parent run gets ``tables/comparison.csv``, plots and a Markdown report).
"""

from __future__ import annotations

from dataclasses import replace

import mlflow

from mlflow_mia.demo.references import expand_demo_references
from mlflow_mia.demo.short_target import build_short_target
from mlflow_mia.entrypoints.common import audit_settings, build_demo_for_audit, print_links, print_result
from mlflow_mia.models.resolve import resolve_model
from mlflow_mia.naming import fmt_alpha
from mlflow_mia.options.values import blank
from mlflow_mia.pipeline.compare import audit_versions, compare_gate, compare_targets, log_comparison
from mlflow_mia.tracking.runs import mlflow_run, outside_project_run, use_experiment

__all__: list[str] = []


def compare(args) -> bool:
    """Run ``mlflow-mia compare`` from parsed CLI ``args``; True when no version failed the release gate or
    left it inconclusive.

    Parameters
    ----------
    args : argparse.Namespace
        The ``compare`` options (``models``, ``aliases``, ``data``, ``demo_size``, ``run_name``, ``quiet``, ...).

    Raises
    ------
    ValueError
        ``--data`` without ``--models``, an unknown alias, a model without versions, bad options.

    Notes
    -----
    On the demo (no ``--data``) without ``--models`` or ``--aliases``, the two versions of the
    demo target are compared: ``@candidate`` and ``@short``, the same recipe trained for a quarter
    of the steps (:func:`~mlflow_mia.demo.short_target.build_short_target`, trained on first use).
    """
    names = [n.strip() for n in (blank(args.models) or "").split(",") if n.strip()]
    aliases = [a.strip().lstrip("@") for a in (blank(args.aliases) or "").split(",") if a.strip()]
    data, demo = blank(args.data), None
    if data is None:  # the demo's data (and target model, unless given)
        demo = build_demo_for_audit(args.demo_size, progress=not args.no_progress, experiment=args.experiment)
        if not names and not aliases:  # two versions worth comparing: the target and the short target
            aliases = _demo_versions(demo, args)
        names = names or [demo.target_uri[len("models:/"):].split("@")[0].split("/")[0]]
        data = str(demo.pool_path)
    elif not names:
        raise ValueError("--data was given without --models: name the registered model(s) to compare")
    config, options, pool, population = audit_settings(args, data=data, demo=demo)
    targets = compare_targets(names, aliases)
    trust = options.trust_remote_code
    if demo is not None:  # demo:oracle, demo:base, demo:shadows, ... (mlflow_mia.demo.references)

        options = replace(options, reference_model=expand_demo_references(options.references, demo.size,
                                                                          progress=not args.quiet) or None)
    # One entry per audit of each version: a model, a tuple (a reference set, --reference-mode set) or None.
    references = [tuple(refs) if len(refs) > 1 else refs[0] if refs else None
                  for refs in ([resolve_model(uri, role="reference", trust_remote_code=trust) for uri in uris]
                               for uris in options.reference_sets)]
    alpha = 0.01 if 0.01 in config.metrics.fprs else min(config.metrics.fprs)
    run_name = blank(args.run_name) or f"compare {', '.join(names)}"
    with mlflow_run(run_name) as parent:
        found = audit_versions(targets, references, parent.info.run_id, pool, population, config, options,
                               on_result=_print_audit)
        log_comparison(found, names, aliases, targets, references, alpha, population, hash_key=options.hash_key)
        overall, verdict = compare_gate(found, parent.info.run_id, run_name)
    gates = [g for g in found["gates"] if g is not None]
    failed = [g for g in gates if g.status == "fail"]
    inconclusive = [g for g in gates if g.status == "inconclusive"]
    a = fmt_alpha(alpha)
    print(f"comparison logged to run {parent.info.run_id}: tables/comparison.csv, plots/comparison.png")
    table = found["table"]
    sample = table[table["level"] == "sample"][["model", "attack", "auc", f"tpr_at_fpr_{a}"]]
    print(sample.to_string(index=False, float_format="{:.3f}".format, na_rep="n/a"))
    if gates:
        print(f"mia.gate={overall}: {len(failed)} of {len(gates)} version(s) over budget, {len(inconclusive)} "
              "inconclusive (the audit shows neither that the budget holds nor that it is exceeded)")
    print(verdict.line())
    experiment = mlflow.MlflowClient().get_experiment(parent.info.experiment_id).name
    print_links(parent.info.run_id, parent.info.experiment_id, experiment, run_name)
    return not failed and not inconclusive


def _print_audit(label: str, result, run, gate) -> None:
    """One version's audit on stdout: its label, then :func:`~mlflow_mia.entrypoints.common.print_result`."""
    print(f"{label}:")
    print_result(result, run, gate)


def _demo_versions(demo, args) -> list[str]:
    """The aliases of the demo's two target versions, ``[target's alias, "short"]``; the short target is
    trained on first use, in a run of its own (even under ``mlflow run``), then the audit's experiment is
    made active again."""
    with outside_project_run() as project_run:
        try:
            short = build_short_target(size=demo.size, progress=not args.no_progress)
        finally:
            if project_run is None:
                use_experiment(blank(args.experiment))
    return [demo.target_uri.rsplit("@", 1)[1], short.rsplit("@", 1)[1]]
