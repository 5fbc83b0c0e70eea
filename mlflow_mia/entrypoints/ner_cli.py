"""``mlflow-mia ner-audit``: the NER prompt memorization audit from the command line.

With ``--model`` and ``--names`` it audits one registered (or saved) token
classifier. Without them it builds the WNUT-16 demo (:mod:`mlflow_mia.demo.wnut`;
skipped when already registered) and audits both taggers, each in a nested run,
then logs to the parent run the control-corrected means (model A on its names, B on
the same names with labels swapped), Kendall's tau of prompt scores across the two
models, and a combined report. Each tagger is the other's reference tagger: its
audit adds the per-name ratio score ``ner/{type}/ratio_*`` (target against the other
tagger's confidence, prompt by prompt).

With ``--max-tpr-at-fpr ALPHA:MAX`` each audit is gated (:mod:`mlflow_mia.metrics.ner_gate`: the TPR at FPR
alpha of member against non-member names, on the ratio score when a reference tagger is given): the command
prints each verdict and exits with 3 unless every gate passes; the audited registry versions get the same
sealed records, ``mia.gate``, ``mia.verdict`` and description as a membership audit's.
"""

from __future__ import annotations

from mlflow_mia.entrypoints.common import EXIT_GATE_FAILED, EXIT_OK
from mlflow_mia.options.values import blank as _blank
from mlflow_mia.audits.base import Settings
from mlflow_mia.audits.ner.scoring import compare_models
from mlflow_mia.audits.ner.kind import parse_ner_config
from mlflow_mia.audits.ner.names import read_private_table, check_names_table
from mlflow_mia.audits.ner.report import render_ner_report
from mlflow_mia.demo.wnut import build_wnut_demo
from mlflow_mia.entrypoints.common import print_links
from mlflow_mia.models.ner import resolve_token_classifier
from mlflow_mia.entrypoints.common import flat_from_args
from mlflow_mia.pipeline.ner import ner_audit_and_log
from mlflow_mia.tracking.artifacts import to_json
from mlflow_mia.tracking.runs import outside_project_run, use_experiment
from mlflow_mia.naming import fmt_number
from mlflow_mia.tracking.descriptions import short_model_name
from mlflow_mia.tracking.ner_log import ner_run_verdict
from mlflow_mia.tracking.verdict import describe_nested, fmt_interval, worst_verdict

__all__: list[str] = []


def _audit_one(model_uri, names, cfg, options, *, run_name: str, nested: bool, title: str, reference_uri=None):
    import mlflow

    tagger = resolve_token_classifier(model_uri)
    reference = resolve_token_classifier(reference_uri) if reference_uri else None
    with mlflow.start_run(run_name=run_name, nested=nested) as run:
        result, gate, _ = ner_audit_and_log(tagger, names, Settings(cfg, options), reference=reference,
                                            run_id=run.info.run_id, title=title, run_name=run_name)
    return result, gate, run.info.run_id


def _print_gate(gate) -> None:
    """The release gate's line and what it means for a release (nothing without a gate)."""
    if gate is not None:
        print(gate.verdict())
        print(gate.message())


_LEGEND = ("  M-MEM = AUC of in-sample vs out-of-sample names (0.5 = none memorized); best / worst = the prompts "
           "that were best / worst on the dev names, scored on the test names (a dev-worst prompt can score "
           "high on test); gap and sigma: spread over prompts on dev; AVG-C: confidences averaged over prompts; "
           "-PT: no prompt")


def _print(result, label: str) -> None:
    print(f"{label} ({result.model_id}):")
    for kind in result.entity_types:
        g = lambda k: result.metrics.get(f"ner/{kind}/{k}", float("nan"))  # noqa: E731
        best = fmt_interval(g("best_prompt_mmem"), (g("best_prompt_mmem_ci_low"), g("best_prompt_mmem_ci_high")))
        print(f"  {kind:<10} best {best}  worst {fmt_number(g('worst_prompt_mmem'))}  "
              f"gap {fmt_number(100 * g('prompt_gap'), 1)} pp  sigma {fmt_number(100 * g('prompt_std'), 2)} pp  "
              f"AVG-C {fmt_number(g('avg_c_mmem'))}  -PT {fmt_number(g('no_pt_mmem'))}"
              + (f"  ratio {fmt_number(g('ratio_avg_mmem'))} [{fmt_number(g('ratio_avg_mmem_ci_low'), 2)}, "
                 f"{fmt_number(g('ratio_avg_mmem_ci_high'), 2)}]" if f"ner/{kind}/ratio_avg_mmem" in result.metrics else ""))
    print(_LEGEND)


def _last_lines(run_id: str) -> None:
    """The run's verdict, its experiment and its UI address (:func:`~mlflow_mia.entrypoints.common.print_links`)."""
    import mlflow

    run = mlflow.MlflowClient().get_run(run_id)
    tags = run.data.tags
    print(f"verdict: {tags.get('mia.verdict')} ({tags.get('mia.verdict.reason')})")
    experiment = mlflow.MlflowClient().get_experiment(run.info.experiment_id).name
    print_links(run_id, run.info.experiment_id, experiment, run.info.run_name)


def _demo(args, cfg, options):
    """Build (or find) the WNUT demo and audit both taggers; log the comparison to a parent run."""
    import mlflow

    try:
        with outside_project_run():
            demo = build_wnut_demo(size=args.demo_size, progress=options.progress)
    except ModuleNotFoundError as exc:
        raise ValueError(f"the NER demo needs {exc.name!r}: pip install 'mlflow-mia[demo]'") from None
    names_a = read_private_table(demo.names_path)
    names_b = names_a.assign(is_member=1 - names_a["is_member"])
    with mlflow.start_run(run_name=f"ner-audit wnut-{args.demo_size}") as parent:
        results, gates = {}, {}
        for label, uri, names, other in (("A", demo.model_a_uri, names_a, demo.model_b_uri),
                                         ("B", demo.model_b_uri, names_b, demo.model_a_uri)):
            results[label], gates[label], _ = _audit_one(uri, names, cfg, options, nested=True, reference_uri=other,
                                                 run_name=f"ner-audit {short_model_name(uri)}",
                                                 title=f"Model {label}: {uri}")
            _print(results[label], f"model {label}")
            _print_gate(gates[label])
        metrics, taus = compare_models(results, controls={"A": "B"})
        mlflow.log_metrics(metrics)
        mlflow.log_params({"ner.model_a": demo.model_a_uri, "ner.model_b": demo.model_b_uri,
                           "ner.entity_types": ",".join(demo.entity_types)})
        mlflow.log_text(taus.to_csv(index=False), "tables/ner_kendall_tau_models.csv")
        verdicts = [(f"model {k}", ner_run_verdict(r, gates[k])) for k, r in results.items()]
        report = [f"# NER prompt memorization audit of {short_model_name(demo.model_a_uri)} and "
                  f"{short_model_name(demo.model_b_uri)}: WNUT-16 demo, two taggers on swapped halves", "",
                  worst_verdict(verdicts).markdown(), "",
                  "Model A's in-sample names are model B's out-of-sample names and the other way round; the mean "
                  "of the two (controlled) cancels a name set that is merely easier to tag.", "",
                  "| type | best A | best B | controlled best | AVG-C A | AVG-C B | controlled AVG-C |",
                  "|---|---|---|---|---|---|---|"]
        for kind in results["A"].entity_types:
            g = lambda r, k: fmt_number(r.metrics.get(f"ner/{kind}/{k}"))  # noqa: E731
            report.append(f"| {kind} | {g(results['A'], 'best_prompt_mmem')} | {g(results['B'], 'best_prompt_mmem')} | "
                          f"{fmt_number(metrics.get(f'ner/{kind}/controlled/best_prompt_mmem'))} | "
                          f"{g(results['A'], 'avg_c_mmem')} | {g(results['B'], 'avg_c_mmem')} | "
                          f"{fmt_number(metrics.get(f'ner/{kind}/controlled/avg_c_mmem'))} |")
        report += ["", render_ner_report(results["A"], title=f"Model A ({demo.model_a_uri})"),
                   render_ner_report(results["B"], title=f"Model B ({demo.model_b_uri})")]
        mlflow.log_text("\n".join(report), "report.md")
        mlflow.log_text(to_json(metrics), "ner_comparison.json")
        print("controlled (mean of A and B): " + ", ".join(
            f"{k.split('/')[1]} {fmt_number(v)}" for k, v in metrics.items() if k.endswith("controlled/best_prompt_mmem")))
        describe_nested(mlflow.MlflowClient(), parent.info.run_id, verdicts,
                        heading="Two taggers trained on swapped halves of the names.")
    _last_lines(parent.info.run_id)
    return EXIT_GATE_FAILED if any(g is not None and not g.passed for g in gates.values()) else EXIT_OK


def cmd_ner_audit(args) -> int:
    """Run ``mlflow-mia ner-audit``; returns the exit code (0 ok, 3 a release gate that did not pass; errors raise
    ValueError).

    The options are parsed and checked (device, ranges, entity types, the names table)
    before the demo is built or any model loads.
    """
    import mlflow

    cfg, options = parse_ner_config(flat_from_args(args, "ner-audit"))
    if _blank(args.tracking_uri):
        mlflow.set_tracking_uri(args.tracking_uri)
    use_experiment(_blank(args.experiment))
    model, names = _blank(args.model), _blank(args.names)
    if model is None and names is None:
        return _demo(args, cfg, options)
    if model is None or names is None:
        raise ValueError("give both --model and --names (or neither, to audit the WNUT-16 demo)")
    table = read_private_table(names)
    label = options.label_column
    if label != "is_member":
        if label not in table.columns:
            raise ValueError(f"--label-column {label!r} is not a column of {names}: {list(table.columns)}")
        table = table.rename(columns={label: "is_member"})
    check_names_table(table, entity_types=cfg.entity_types)  # before the model loads
    result, gate, run_id = _audit_one(model, table, cfg, options, run_name=f"ner-audit {short_model_name(model)}",
                                      nested=False, title=None)
    _print(result, "model")
    _print_gate(gate)
    _last_lines(run_id)
    return EXIT_GATE_FAILED if gate is not None and not gate.passed else EXIT_OK  # fail or inconclusive
