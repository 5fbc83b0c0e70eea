"""The generator-quality check of the neighbourhood attack on the demo's two reference generators.

Prints ``GeneratorQuality.metrics()`` and the warning (if any) for the in-domain
and out-of-domain references as generators, for each signal asked for, on the
demo's pool and population; 100 texts sampled per check.

Usage (after ``mlflow-mia build-demo --size small``, or the default demo of ``mlflow run . -e audit``)::

    MLFLOW_TRACKING_URI=sqlite:////tmp/nb/mlflow.db MLFLOW_MIA_DEMO_DIR=/tmp/nb/demo \
        python benchmarks/check_generator_demo.py --size small --signals pll,energy
"""

import argparse

import pandas as pd

from mlflow_mia.config import AuditConfig, SignalConfig
from mlflow_mia.demo.build import demo_spec
from mlflow_mia.models.resolve import resolve_model
from mlflow_mia.signals import SignalCache, compute_signals
from mlflow_mia.signals.generator_quality import check_generator


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="small", choices=("small", "default"))
    ap.add_argument("--signals", default="pll,energy", help="comma-separated: pll, energy")
    ap.add_argument("--cache", default=None, help="signal cache directory (default: the project default)")
    args = ap.parse_args()
    spec = demo_spec(args.size)
    pool = pd.read_json(spec.pool_path, lines=True)
    pop = pd.read_json(spec.population_path, lines=True)["text"].tolist()
    target = resolve_model(spec.target_uri, role="target").lm
    cache = SignalCache(args.cache)
    for gen_uri in (spec.reference_uri, spec.ood_reference_uri):
        gen = resolve_model(gen_uri, role="neighbour generator").lm
        for kind in args.signals.split(","):
            config = AuditConfig(signal=SignalConfig(kind=kind))
            energy = compute_signals(target, pool["text"].tolist(), config.signal, cache=cache, progress=False).values
            quality = check_generator(target, gen, pool["text"].tolist(), pool["is_member"].to_numpy(), energy, pop,
                                      config=config, cache=cache)
            print(gen_uri, kind, {k: round(v, 3) for k, v in quality.metrics().items()}, quality.n_words,
                  quality.n_neighbours)
            print("  ", quality.warning())


if __name__ == "__main__":
    main()
