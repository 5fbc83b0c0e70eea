"""The generator-quality check of the neighbourhood attack on the demo's two reference generators.

Prints ``GeneratorQuality.metrics()`` and the warning (if any) for the in-domain
and out-of-domain references as generators, under PLL and the energy signal, on
the small demo's pool (150 + 150) and population (300); 100 texts sampled per check.

Usage (after ``mlflow-mia build-demo --size small``)::

    MLFLOW_TRACKING_URI=sqlite:////tmp/nb/mlflow.db MLFLOW_MIA_DEMO_DIR=/tmp/nb/demo \
        python benchmarks/check_generator_demo.py
"""
import pandas as pd
from mlflow_mia.config import AuditConfig
from mlflow_mia.demo.build import demo_spec
from mlflow_mia.integrations.models import resolve_model
from mlflow_mia.signals import SignalCache, compute_signals
from mlflow_mia.signals.generator_quality import check_generator

spec = demo_spec("small")
pool = pd.read_json(spec.pool_path, lines=True)
pop = pd.read_json(spec.population_path, lines=True)["text"].tolist()
target = resolve_model(spec.target_uri, role="target").lm
cache = SignalCache("/tmp/nb/cache")
for gen_uri in (spec.reference_uri, spec.ood_reference_uri):
    gen = resolve_model(gen_uri, role="reference").lm
    for kind in ("pll", "energy"):
        cfg = AuditConfig(signal={"kind": kind})
        e = compute_signals(target, pool["text"].tolist(), cfg.signal, cache=cache, progress=False).energy
        q = check_generator(target, gen, pool["text"].tolist(), pool["is_member"].to_numpy(), e, pop, config=cfg, cache=cache)
        print(gen_uri.split("/")[-1], kind, {k: round(v, 3) for k, v in q.metrics().items()}, q.n_words, q.n_neighbours)
        print("  ", q.warning())
