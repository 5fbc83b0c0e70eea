"""What ``mlflow-mia analyze`` runs: its sizes, its target variants and its audits.

The suite reproduces the findings of Mireshghallah et al. (2022), Sections 4.1-4.3 and
appendix A.3, and the DP-SGD defence of Mattern et al. (2023), Table 6, on the BBC News
demo (:mod:`mlflow_mia.demo.build`). Every audit is one :class:`Experiment`: a target
(the demo's own or a :class:`Variant` trained from the demo's base model), a reference
(a demo role), a signal and a pool. Findings (:mod:`mlflow_mia.analyze.findings`) read
their numbers off these audits' logged metrics.

Two sizes (:data:`ANALYSIS_SIZES`): ``full`` on the default demo (about an hour on 2
CPU cores, building the demo included) and ``quick`` on the small demo (a few minutes;
the tests use it). Their numbers differ; only ``full`` backs ``docs/findings.md``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

__all__ = ["ANALYSIS_SIZES", "AnalysisSize", "Experiment", "REFERENCE_ROLES", "Variant", "experiments", "experiments_for",
           "variants"]

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
    short_fraction : float
        The short schedule's share of the demo target's fine-tuning steps. 0.4 is the
        paper's Base : Base++ ratio (400k : 1M iterations, Table 1).
    large_layers : int
        Layers of the larger target (the demo's have 2; hidden sizes are kept).
    dp_epsilons : tuple of float
        Target epsilons of the DP-SGD runs (the issue's 8 and 1).
    dp_delta : float
        Delta of the DP-SGD accountant and of the audit's epsilon lower bound.
    dp_epochs, dp_batch_size, dp_learning_rate : float, int, float
        DP-SGD fine-tuning schedule: larger batches and fewer steps than the non-private
        target, as DP-SGD needs (Li et al. 2022), with the same starting point.
    """

    demo_size: str
    num_masks: int
    bootstrap_rounds: int
    fprs: tuple
    short_fraction: float = 0.4
    large_layers: int = 4
    dp_epsilons: tuple = (8.0, 1.0)
    dp_delta: float = 1e-5
    dp_epochs: float = 15.0
    dp_batch_size: int = 128
    dp_learning_rate: float = 2e-3

    def to_params(self) -> dict:
        """Flat MLflow params (``analyze.<field>``)."""
        return {f"analyze.{k}": ",".join(map(str, v)) if isinstance(v, tuple) else v for k, v in asdict(self).items()}


ANALYSIS_SIZES: dict[str, AnalysisSize] = {
    "full": AnalysisSize(demo_size="default", num_masks=10, bootstrap_rounds=1000, fprs=(0.1, 0.01, 0.001)),
    "quick": AnalysisSize(demo_size="small", num_masks=5, bootstrap_rounds=200, fprs=(0.1, 0.01),
                          dp_epochs=5.0, dp_batch_size=32),
}


@dataclass(frozen=True)
class Variant:
    """A target model the suite trains from the demo's base model and registers.

    Attributes
    ----------
    name : str
        Registered as ``<demo prefix>analyze-<name>`` with alias ``candidate``.
    kind : {"short", "large", "names", "dp"}
        ``short``: fine-tuned for ``short_fraction`` of the target's steps; ``large``: a
        deeper base trained from scratch, then fine-tuned like the target; ``names``:
        fine-tuned on the member sentences with a person's name prepended to each
        (paper's Base-b); ``dp``: fine-tuned with DP-SGD.
    epsilon : float or None
        Target epsilon of a ``dp`` variant.
    """

    name: str
    kind: str
    epsilon: float | None = None


@dataclass(frozen=True)
class Experiment:
    """One audit of the suite, logged as one nested run.

    Attributes
    ----------
    name : str
        Run name and key of the experiment.
    target : str
        ``"target"`` (the demo's) or the name of a :class:`Variant`.
    reference : str
        The demo role used as reference model, a key of :data:`REFERENCE_ROLES`:
        ``"reference"`` (the oracle reference), ``"ood_reference"``, ``"base"`` (the public
        base) or ``"shadow-<i>"``.
    signal : {"energy", "pll"}
    names_pool : bool
        Audit the pool whose member sentences carry the inserted names (``names`` variant).
    subsets : tuple of str
        Extra reports logged under a metric prefix: ``"length"`` adds ``len_short/...``
        and ``len_long/...`` (paper Table 3's 10-20 and 20-60 tokens).
    """

    name: str
    target: str = "target"
    reference: str = "reference"
    signal: str = "energy"
    names_pool: bool = False
    subsets: tuple = field(default_factory=tuple)

    def __post_init__(self):
        if self.reference not in REFERENCE_ROLES:
            raise ValueError(f"unknown reference role {self.reference!r}; choose from {sorted(REFERENCE_ROLES)}")


def variants(size: AnalysisSize) -> dict[str, Variant]:
    """The size's target variants by name."""
    dp = [Variant(f"dp-eps{eps:g}", "dp", epsilon=eps) for eps in size.dp_epsilons]
    return {v.name: v for v in (Variant("short", "short"), Variant("large", "large"), Variant("names", "names"), *dp)}


def experiments(size: AnalysisSize) -> dict[str, Experiment]:
    """Every audit of the suite by name, in run order (cheapest first: shared signals are cached)."""
    exps = [
        Experiment("baseline", subsets=("length",)),
        Experiment("reference-ood", reference="ood_reference"),
        Experiment("reference-general", reference="base"),
        Experiment("pll", signal="pll"),
        Experiment("short-training", target="short"),
        Experiment("name-insertion", target="names", names_pool=True),
        Experiment("larger-model", target="large"),
        *(Experiment(f"dp-sgd-eps{eps:g}", target=f"dp-eps{eps:g}") for eps in size.dp_epsilons),
    ]
    return {e.name: e for e in exps}


def experiments_for(findings, size: AnalysisSize) -> list[Experiment]:
    """The experiments the given findings read, in run order.

    Parameters
    ----------
    findings : sequence of Finding
        From :data:`mlflow_mia.analyze.findings.FINDINGS`.
    size : AnalysisSize

    Returns
    -------
    list of Experiment
    """
    needed = {s.experiment for f in findings for s in f.settings(size)}
    return [e for name, e in experiments(size).items() if name in needed]
