"""How often the release gate passes and fails when the truth is known: a seeded simulation.

Scores are Gaussian (non-members N(0, 1), members N(mu, 1)), so the true TPR at 1 % FPR is
``1 - Phi(z_0.99 - mu)``. Each audit has 500 non-members and a population of 500; with
``--grouped`` samples come in groups of 5 that share an effect (membership decided per
group). The gate's budget is TPR at 1 % FPR <= 0.2. A valid gate passes at most 5 % of
audits whose true TPR equals the budget, and fails at most 5 % of them::

    python benchmarks/gate_calibration.py --audits 400
    python benchmarks/gate_calibration.py --audits 200 --grouped
    python benchmarks/gate_calibration.py --audits 400 --rounds 0     # no bootstrap: the binomial bounds alone
    python benchmarks/gate_calibration.py --audits 1000 --skewed

``--skewed``: 300 member articles of log-normal sizes (``round(5 exp(N(0, 1.5)))``, at least 1:
Kish's effective number of articles about 50) whose samples share an article effect at an
intra-class correlation (ICC) of 0.99 or 0.95, and 20,000 independent non-members. Counting
each article as one trial of the member bound passed 9.8 % (ICC 0.99) and 10.2 % (0.95) of such
audits at the budget (``--audits 400``); the bound counts Kish's effective number of articles
instead: 0.3 % and 0 % of the same audits. Only the sample level is
gated here (an audit gates the user level as well, which can only block more passes).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from scipy.stats import norm

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "metrics"))
from test_release_gate import _simulate, _simulate_skewed  # noqa: E402  (the tests' simulation: one definition)

from mlflow_mia.metrics.gate import FAIL, PASS, Gate  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--audits", type=int, default=400, help="simulated audits per row")
    parser.add_argument("--rounds", type=int, default=1000, help="bootstrap rounds of each audit (0 = none)")
    parser.add_argument("--grouped", action="store_true", help="groups of 5 samples sharing an effect")
    parser.add_argument("--skewed", action="store_true",
                        help="300 member articles of log-normal sizes at ICC 0.99 and 0.95, 20,000 non-members")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    gate = Gate.parse("0.01:0.2")
    if args.skewed:
        return _skewed(gate, args)
    print(f"budget TPR at 1 % FPR <= 0.2; {args.audits} audits per row; bootstrap rounds {args.rounds}; "
          f"{'groups of 5' if args.grouped else 'independent samples'}")
    print("| true TPR at 1 % FPR | members | pass rate | fail rate |")
    print("|---|---|---|---|")
    rng = np.random.default_rng(args.seed)
    for tpr, sizes in ((0.2, (1, 3, 10, 30, 100, 300)), (0.05, (300,)), (0.5, (30, 300))):
        mu = norm.ppf(0.99) - norm.ppf(1 - tpr)
        for n in sizes:
            status = [gate.check(_simulate(n, mu, rng, grouped=args.grouped, rounds=args.rounds)).status
                      for _ in range(args.audits)]
            print(f"| {tpr:g} | {n} | {status.count(PASS) / args.audits:.3f} | "
                  f"{status.count(FAIL) / args.audits:.3f} |", flush=True)
    return 0


def _skewed(gate, args) -> int:
    """Rows of the skewed-size case: pass and fail rates at the budget (ICC 0.99 and 0.95), under and over it."""
    print(f"budget TPR at 1 % FPR <= 0.2; {args.audits} audits per row; bootstrap rounds {args.rounds}; 300 member "
          "articles of log-normal sizes (sigma 1.5), 20,000 non-members")
    print("| true TPR at 1 % FPR | ICC | pass rate | fail rate |")
    print("|---|---|---|---|")
    rng = np.random.default_rng(args.seed)
    for tpr, icc in ((0.2, 0.99), (0.2, 0.95), (0.05, 0.99), (0.5, 0.99)):
        mu = norm.ppf(0.99) - norm.ppf(1 - tpr)
        status = [gate.check(_simulate_skewed(mu, rng, icc=icc, rounds=args.rounds)).status
                  for _ in range(args.audits)]
        print(f"| {tpr:g} | {icc:g} | {status.count(PASS) / args.audits:.3f} | "
              f"{status.count(FAIL) / args.audits:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
