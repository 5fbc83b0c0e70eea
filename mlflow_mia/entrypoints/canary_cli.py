"""``mlflow-mia canary-audit``, the canary audit's command; the keys of ``method="canaries"`` of the ``mia`` evaluator.

With ``--target`` and ``--canaries`` it audits one model fine-tuned with the canary set
inserted; without them, the built-in canary demo (:mod:`mlflow_mia.demo.canary`: a
target fine-tuned with about 1,000 canaries planted, built on first use). Exit codes
as the membership audit: 0 done (gate passed or none), 2 bad input, 3 the gate did not
pass (``fail`` or ``inconclusive``).

Evaluator form (``data`` is the set's id table, which holds no text, secret or bit)::

    mlflow.models.evaluate(model=None, data=canary_set.id_frame(), model_type="mia", evaluators=["mia"],
                           evaluator_config={"mia": {"method": "canaries", "target_model": "models:/m@candidate",
                                                     "canaries": "canaries.json", "max_exposure": 4}})

Keys (unknown keys are an error; generated from their declarations, :mod:`mlflow_mia.options.schema`):

"""

from __future__ import annotations

import contextlib
import math
from dataclasses import replace

from mlflow_mia.audits.base import Settings
from mlflow_mia.audits.canary.inputs import load_canary_set
from mlflow_mia.audits.canary.kind import CANARY
from mlflow_mia.entrypoints.common import EXIT_GATE_FAILED, EXIT_OK
from mlflow_mia.options.schema import key_table
from mlflow_mia.options.values import blank as _blank
from mlflow_mia.entrypoints.common import print_links
from mlflow_mia.models.resolve import resolve_model, resolve_reference
from mlflow_mia.naming import fmt_number, fmt_alpha
from mlflow_mia.options.canary import parse_canary_config
from mlflow_mia.entrypoints.common import flat_from_args
from mlflow_mia.pipeline.canary import canary_audit_and_log
from mlflow_mia.tracking.canary_log import auc_text, exposure_text, headline_repetitions
from mlflow_mia.tracking.runs import use_experiment, outside_project_run
from mlflow_mia.tracking.descriptions import short_model_name
from mlflow_mia.tracking.verdict import canary_verdict, describe_nested

if __doc__:
    __doc__ += key_table("canaries") + "\n"

__all__: list[str] = []



def _headline(result) -> str:
    """One line: the record-level bound, then AUC (with interval) and mean exposure at r = 1 and the largest r
    (with the rank-based value, ``>=`` where capped, when the exposure is extrapolated from sampled candidates)."""
    m = result.metrics
    shown = headline_repetitions(result)
    auc = ", ".join(f"r = {r} {auc_text(m, r)}" for r in shown)
    expo = ", ".join(f"r = {r} {exposure_text(m, f'canary/r{r}')}" for r in shown
                     if f"canary/r{r}/exposure_mean" in m)
    return (f"canaries: record-level epsilon lower bound {fmt_number(m.get('canary/epsilon_lower_bound'))} (one "
            f"canary = one record); AUC {auc or 'n/a'}; mean exposure {expo or 'n/a'} "
            f"({result.config.confidence:.0%} intervals)")


def _table_lines(result, label: str) -> list[str]:
    """The console table: per repetition count AUC, TPR at each FPR, exposure, epsilon bound; n/a (never nan)
    for what is unresolved or missing, with the reasons, and ``>=`` for a capped rank-based exposure."""
    lines = [f"canary audit of {label} ({result.attack}):"]
    for _, row in result.table.iterrows():
        g = lambda k: row.get(k, math.nan)  # noqa: E731
        prefix = "canary" if row["group"] == "all" else f"canary/{row['group']}"
        tprs = "".join(f"  TPR@{a:g} {fmt_number(g(f'tpr_at_fpr_{fmt_alpha(a)}'))}" for a in result.config.fprs)
        lines.append(f"  {row['group']:<4} canaries {row['n_canaries']:>5}  AUC {fmt_number(g('auc'))}{tprs}  "
                     f"exposure {exposure_text(result.metrics, prefix)} (excluded "
                     f"{fmt_number(g('exposure_excluded_mean'), 2)})  epsilon "
                     + ("n/a" if math.isnan(g("epsilon_lower_bound")) else f">= {g('epsilon_lower_bound'):.3f}"))
    lines += [f"  n/a: {key} ({why})" for key, why in result.unresolved.items()]
    lines.append(f"  record-level epsilon lower bound {fmt_number(result.record_level_epsilon)} (one canary = one "
                 f"record, delta {result.config.delta:g}, {result.config.confidence:.0%})")
    return lines


def _print(result, gate, run_id: str, label: str) -> None:
    """The table per repetition count and the gate, then the last lines: verdict, headline numbers, links."""
    import mlflow

    for line in _table_lines(result, label):
        print(line)
    if gate is not None:
        print(gate.verdict())
        print(gate.message())
    run = mlflow.MlflowClient().get_run(run_id)
    tags = run.data.tags
    print(f"verdict: {tags.get('mia.verdict')} ({tags.get('mia.verdict.reason')})")
    print(_headline(result))
    experiment = mlflow.MlflowClient().get_experiment(run.info.experiment_id).name
    print_links(run_id, run.info.experiment_id, experiment, run.info.run_name)


def _audit(target_uri, canaries, cfg, options, *, run_name: str | None = None, nested: bool = False,
           extra_params=None):
    """Resolve the models and audit in a run named ``run_name`` (default ``canary-audit <model>``)."""
    import mlflow

    trust = options.trust_remote_code
    target = resolve_model(target_uri, role="target", trust_remote_code=trust, base_model=options.base_model)
    reference = (resolve_reference(options.reference_model, target=target, trust_remote_code=trust)
                 if options.reference_model else None)
    name = run_name or f"canary-audit {short_model_name(target.resolved_uri)}"
    with mlflow.start_run(run_name=name, nested=nested) as run:
        result, verdict, _ = canary_audit_and_log(target, canaries, cfg, options, reference=reference,
                                                  run_id=run.info.run_id, extra_params=extra_params, run_name=name)
    _print(result, verdict, run.info.run_id, target.resolved_uri)
    return result, verdict


def cmd_canary_audit(args) -> int:
    """Run ``mlflow-mia canary-audit``; returns 0, or 3 when a gate did not pass (errors raise ValueError)."""
    import mlflow

    cfg, options = parse_canary_config(flat_from_args(args, "canary-audit"))
    if _blank(args.tracking_uri):
        mlflow.set_tracking_uri(args.tracking_uri)
    target, source = _blank(args.target), options.canaries
    if target is None and source is None:
        return _demo(args, cfg, options)
    if target is None:
        raise ValueError("--canaries was given without --target: name the model fine-tuned with them")
    canaries = load_canary_set(source)  # before the model loads
    CANARY.gate(Settings(cfg, options), canaries)  # a seeded set or a loose budget is refused before the model loads
    use_experiment(_blank(args.experiment))
    _, verdict = _audit(target, canaries, cfg, options, run_name=_blank(args.run_name))
    return EXIT_GATE_FAILED if verdict is not None and not verdict.passed else EXIT_OK


def _demo(args, cfg, options) -> int:
    """Build (or reuse) the canary demo and audit its non-private and DP-SGD targets, one run each.

    Under ``mlflow run`` the two audits are nested runs of the project run, which is named
    ``canary-audit demo-<size>`` and gets the more severe of their verdicts.

    The demo's canary set is drawn from a fixed seed (it is reproducible by design), so a
    gated demo audit runs as ``allow_seeded_canaries`` does: recorded as not a release audit.
    """
    import mlflow

    try:
        from mlflow_mia.demo.canary import build_canary_demo
    except ImportError as exc:
        raise ValueError(f"the canary demo is not available ({exc}); give --target and --canaries") from None
    with outside_project_run() as project_run:
        demo = build_canary_demo(size=args.demo_size, progress=options.progress)
    use_experiment(_blank(args.experiment))
    canaries = load_canary_set(demo.canaries_path)
    options = replace(options, allow_seeded_canaries=True)  # the demo's seeded set: never a release audit
    blocked, verdicts = False, []
    with contextlib.ExitStack() as stack:
        parent = stack.enter_context(mlflow.start_run()) if project_run is not None else None
        for label, uri in demo.targets().items():
            params = {"canary.demo_target": label, **demo.params(label)}
            result, gate = _audit(uri, canaries, cfg, options, nested=parent is not None, extra_params=params)
            blocked = blocked or (gate is not None and not gate.passed)
            verdicts.append((label, canary_verdict(result.metrics, gate, confidence=cfg.confidence)))
        if parent is not None:
            describe_nested(mlflow.MlflowClient(), parent.info.run_id, verdicts,
                            name=f"canary-audit demo-{args.demo_size}", heading="One nested run per demo target:")
    return EXIT_GATE_FAILED if blocked else EXIT_OK
