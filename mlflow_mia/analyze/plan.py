"""What ``mlflow-mia analyze`` runs: its sizes, its target variants and its audits.

The suite reproduces the findings of Mireshghallah et al. (2022), Sections 4.1-4.3 and
appendix A.3, and the DP-SGD defence of Mattern et al. (2023), Table 6, on the BBC News
demo (:mod:`mlflow_mia.demo.build`). Every audit is one :class:`Experiment`: a target
(the demo's own or a :class:`Variant` trained from the demo's base model), a reference
(a demo role), a signal and a pool. Findings (:mod:`mlflow_mia.analyze.findings`) read
their numbers off these audits' logged metrics.

Every seeded experiment runs once per seed of the size (:attr:`AnalysisSize.seeds`);
its run is named :func:`run_name` (``baseline-seed1``). A seed sets the target's
fine-tuning (batch order, masking, dropout, DP noise) and the audit's masks; the base
models and the references are trained once (seed 0), like the demo's. Seed 0 of the
plain target is the demo's own target. Every seeded experiment also names its *null*:
the same audit with the target replaced by the base model it was fine-tuned from, which
saw no pool text (run once), so each finding's table shows the floor its numbers sit on.

Two sizes (:data:`ANALYSIS_SIZES`): ``full`` on the default demo with 3 seeds (hours
on 2 CPU cores) and ``quick`` on the small demo with 1 seed and short DP-SGD runs (a
few minutes; the tests use it). The quick size backs no claim: one seed cannot measure
the seed spread, and its pools are 150 sentences a side. Only ``full`` backs
``docs/results/findings.md``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

__all__ = ["ANALYSIS_SIZES"]

#: The demo references an :class:`Experiment` can audit against (its ``reference``), and what each is.
#: The shadow references (:mod:`mlflow_mia.demo.references`) are built on first use by the suite.
REFERENCE_ROLES = {
    "reference": "oracle reference: the base fine-tuned like the target on disjoint in-domain articles",
    "ood_reference": "out-of-domain reference: the base fine-tuned like the target on other categories",
    "base": "public base: the checkpoint the target was fine-tuned from",
    **{f"shadow-{i}": f"shadow reference {i}: the base fine-tuned like the target on a random half of the "
                      "in-domain reference articles" for i in range(4)},
}


@dataclass(frozen=True)
class AnalysisSize:
    """Settings of one suite size.

    Attributes
    ----------
    demo_size : str
        Key of :data:`mlflow_mia.demo.build.DEMO_SIZES` the suite audits and trains on.
    num_masks, bootstrap_rounds, fprs : int, int, tuple of float
        This size's values of the audit options of those names (declared, with their
        ranges, on :class:`~mlflow_mia.config.SignalConfig` and
        :class:`~mlflow_mia.config.MetricConfig`); 0.01 must be one of the FPRs: the
        findings table reports the TPR at 1 % FPR.
    seeds : tuple of int
        Seeds of every seeded experiment (3 at full size, 1 at quick size).
    short_fraction : float
        The short schedule's share of the demo target's fine-tuning steps. 0.4 is the
        paper's Base : Base++ ratio (400k : 1M iterations, Table 1).
    large_layers : int
        Layers of the larger models (the demo's have 2; hidden sizes are kept).
    large_lr_scale : float
        Learning rates of the larger base, reference and target are the demo's times
        this: a deeper post-LayerNorm BERT diverges or stalls at the 2-layer rates (the
        previous build's 4-layer base ended at 6.77 nats against 6.12). Each size's
        held-out loss is logged, and the model-size finding stays unresolved when the
        larger target's is worse than the default's by more than ``HELDOUT_TOLERANCE``
        (under-trained, not larger); a lower loss is what a larger model is expected to reach.
    dp_epsilons : tuple of float
        Target epsilons of the DP-SGD runs (8 and 1); a sigma = 0 control runs the same
        recipe without noise.
    dp_delta : float
        Delta of the DP-SGD accountant and of the audit's epsilon lower bound.
    dp_epochs, dp_batch_size, dp_learning_rate : float, int, float
        DP-SGD fine-tuning schedule: larger batches than the non-private target, as
        DP-SGD needs (Li et al. 2022), with the same starting point.
    dp_freeze : tuple of str
        Parameter-name prefixes frozen during DP-SGD. Freezing the embeddings (the word
        embeddings are tied to the MLM decoder and hold most of the weights: 8000 x 128
        of about 1.5M at full size) leaves the noise fewer dimensions to spread over,
        so the DP targets learn (held-out loss below the base's) where the full update
        did not (training loss 6.48 / 6.53 against the base's 6.12 in the previous build).
        It also removes what the target memorises: with the embeddings frozen the sigma = 0
        control does not leak, with every parameter trained (``()``, lr 2e-3) it leaks like
        the non-private target (one-seed probe, ``benchmarks/dp_recipe.py``,
        docs/results/findings.md), so the DP-SGD finding can only be decided on the latter.
    """

    demo_size: str
    num_masks: int
    bootstrap_rounds: int
    fprs: tuple
    seeds: tuple = (0, 1, 2)
    short_fraction: float = 0.4
    large_layers: int = 4
    large_lr_scale: float = 0.5
    dp_epsilons: tuple = (8.0, 1.0)
    dp_delta: float = 1e-5
    dp_epochs: float = 15.0
    dp_batch_size: int = 128
    dp_learning_rate: float = 5e-4
    dp_freeze: tuple = ("bert.embeddings.",)

    def to_params(self) -> dict:
        """Flat MLflow params (``analyze.<field>``)."""
        return {f"analyze.{k}": ",".join(map(str, v)) if isinstance(v, tuple) else v for k, v in asdict(self).items()}


ANALYSIS_SIZES: dict[str, AnalysisSize] = {
    "full": AnalysisSize(demo_size="default", num_masks=10, bootstrap_rounds=1000, fprs=(0.1, 0.01, 0.001)),
    "quick": AnalysisSize(demo_size="small", num_masks=5, bootstrap_rounds=200, fprs=(0.1, 0.01), seeds=(0,),
                          dp_epochs=2.0, dp_batch_size=64, dp_learning_rate=1e-3),
}


@dataclass(frozen=True)
class Variant:
    """A model the suite trains and registers (a target, or the larger size's base and reference).

    Attributes
    ----------
    name : str
        Registered as ``<demo prefix>analyze-<name>`` with alias ``candidate``.
    kind : {"plain", "short", "large_base", "large_reference", "large", "names", "dp"}
        ``plain``: the demo target's recipe at another seed; ``short``: fine-tuned for
        ``short_fraction`` of the target's steps; ``large_base``: a deeper base trained
        from scratch on the base's data; ``large_reference`` / ``large``: that base
        fine-tuned like the demo's reference / target; ``names``: fine-tuned on the
        member sentences with a person's name prepended to each (paper's Base-b);
        ``dp``: fine-tuned with DP-SGD.
    epsilon : float or None
        Target epsilon of a ``dp`` variant; None with ``noise_multiplier`` 0 (the
        clip-only control).
    noise_multiplier : float or None
        A ``dp`` variant's fixed noise multiplier instead of a target epsilon.
    start : str
        What it is fine-tuned from: ``"base"`` (the demo's) or another variant's name.
    seeded : bool
        Trained once per seed (False: once, at seed 0, shared by every seed).
    """

    name: str
    kind: str
    epsilon: float | None = None
    noise_multiplier: float | None = None
    start: str = "base"
    seeded: bool = True


@dataclass(frozen=True)
class Experiment:
    """One audit of the suite, logged as one nested run per seed (one run when not seeded).

    Attributes
    ----------
    name : str
        Key of the experiment; runs are named :func:`run_name`.
    target : str
        ``"target"`` (the demo's at seed 0, a ``plain`` variant at other seeds), a demo
        role (``"base"``) or the name of a :class:`Variant`.
    reference : str
        The demo role used as reference model, a key of :data:`REFERENCE_ROLES`
        (``"reference"``: the oracle reference, ``"ood_reference"``, ``"base"``: the public
        base, ``"shadow-<i>"``), or the :class:`Variant` used as reference model.
    signal : {"energy", "pll"}
    energy_reduction : {"sum", "mean"}
        The masked energy's reduction over masked tokens (``SignalConfig.energy_reduction``).
    names_pool : bool
        Audit the pool and population whose sentences all carry synthetic names
        (members: the names the ``names`` variant was trained with).
    subsets : tuple of str
        Extra reports logged under a metric prefix: ``"length"`` adds ``len_short/...``
        and ``len_long/...`` (paper Table 3's 10-20 and 20-60 tokens).
    seeded : bool
        One run per seed of the size (False: one run, seed 0; the nulls).
    null : str
        Name of the experiment that audits this one's base model as the target ("" for none).
    """

    name: str
    target: str = "target"
    reference: str = "reference"
    signal: str = "energy"
    energy_reduction: str = "sum"
    names_pool: bool = False
    subsets: tuple = field(default_factory=tuple)
    seeded: bool = True
    null: str = ""


def run_name(experiment: str, seed: int | None) -> str:
    """Run name of an experiment at a seed: ``"baseline-seed0"``; the bare name when ``seed`` is None."""
    return experiment if seed is None else f"{experiment}-seed{seed}"



def variants(size: AnalysisSize) -> dict[str, Variant]:
    """The size's variants by name (a variant's ``start`` comes before it)."""
    dp = [Variant(f"dp-eps{eps:g}", "dp", epsilon=eps) for eps in size.dp_epsilons]
    return {v.name: v for v in (
        Variant("target", "plain"), Variant("short", "short"), Variant("large-base", "large_base", seeded=False),
        Variant("large-reference", "large_reference", start="large-base", seeded=False),
        Variant("large", "large", start="large-base"), Variant("names", "names"),
        Variant("dp-sigma0", "dp", noise_multiplier=0.0), *dp)}


def _nulls() -> list[Experiment]:
    """The null audits: a model that never saw the pool as the target, against each reference, signal and pool used.

    That model is the target's base, except against the base itself as reference: the audit refuses a
    reference with the target's own weights (every likelihood ratio would be 0), so the general reference's null
    audits the in-domain reference model (fine-tuned like the target on articles outside the pool).
    """
    return [Experiment("null", target="base", subsets=("length",), seeded=False),
            Experiment("null-ood", target="base", reference="ood_reference", seeded=False),
            Experiment("null-general", target="reference", reference="base", seeded=False),
            Experiment("null-pll", target="base", signal="pll", seeded=False),
            Experiment("null-energy-mean", target="base", energy_reduction="mean", seeded=False),
            Experiment("null-names", target="base", names_pool=True, seeded=False),
            Experiment("null-large", target="large-base", reference="large-reference", seeded=False)]


def experiments(size: AnalysisSize) -> dict[str, Experiment]:
    """Every audit of the suite by name, in run order (cheapest first: shared signals are cached)."""
    exps = [
        Experiment("baseline", subsets=("length",), null="null"),
        Experiment("reference-ood", reference="ood_reference", null="null-ood"),
        Experiment("reference-general", reference="base", null="null-general"),
        Experiment("energy-mean", energy_reduction="mean", null="null-energy-mean"),
        Experiment("pll", signal="pll", null="null-pll"),
        Experiment("short-training", target="short", null="null"),
        Experiment("name-insertion", target="names", names_pool=True, null="null-names"),
        Experiment("larger-model", target="large", reference="large-reference", null="null-large"),
        Experiment("dp-sgd-sigma0", target="dp-sigma0", null="null"),
        *(Experiment(f"dp-sgd-eps{eps:g}", target=f"dp-eps{eps:g}", null="null") for eps in size.dp_epsilons),
        *_nulls(),
    ]
    check_models(exps, size)
    return {e.name: e for e in exps}


def check_models(exps, size: AnalysisSize) -> None:
    """Raise if an experiment names a target or reference that is neither a demo role nor a variant of ``size``.

    Raises
    ------
    ValueError
        Naming the experiment, the unknown model and the known names.
    """
    known = set(REFERENCE_ROLES) | set(variants(size))
    for e in exps:
        for role, name in (("target", e.target), ("reference", e.reference)):
            if name not in known:
                raise ValueError(f"experiment {e.name!r}: unknown {role} {name!r}; choose a demo role or a variant: "
                                 f"{sorted(known)}")


def experiments_for(findings, size: AnalysisSize) -> list[Experiment]:
    """The experiments the given findings read (their settings' and those settings' nulls), in run order.

    Parameters
    ----------
    findings : sequence of Finding
        From :data:`mlflow_mia.analyze.findings.FINDINGS`.
    size : AnalysisSize

    Returns
    -------
    list of Experiment
    """
    exps = experiments(size)
    needed = {s.experiment for f in findings for s in f.settings(size)}
    needed |= {exps[n].null for n in needed if n in exps and exps[n].null}
    return [e for name, e in exps.items() if name in needed]
