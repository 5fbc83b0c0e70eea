"""Compare every version (or some aliases) of a registered model against one reference.

    pip install -e '.[demo]'
    python examples/compare_versions.py --size small
    python examples/compare_versions.py --aliases champion,candidate
    python examples/compare_versions.py --size small --models bbc-small-target,bbc-small-reference-ood

One parent run with a nested run per version; the parent holds tables/comparison.csv
(attack x model version: AUC with CI, TPR at each FPR), plots/comparison.png and one ROC
overlay per attack. The reference signals are computed once (the signal cache). The same
from a shell: ``mlflow-mia compare --models bbc-target ...`` or
``mlflow run . -e compare --env-manager local``. Exit codes as ``mlflow-mia``: 0 done (every
gate passed or none set), 1 the audit broke, 2 usage or input error, 3 a version's release
gate did not pass (fail or inconclusive; its registry version is tagged ``mia.gate``, and a
fail stays there until an audit at least as strong passes with ``--clear-gate-fail``).
"""

import argparse
import sys

from mlflow_mia.entrypoints.cli import main

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--size", choices=("default", "small"), default="default", help="demo size")
parser.add_argument("--models", default="", help="registered model name(s) (default: the demo's target)")
parser.add_argument("--aliases", default="", help="aliases to compare, e.g. champion,candidate (default: all; on the demo, "
                    "candidate and short, the target trained a quarter as long)")
parser.add_argument("--max-tpr-at-fpr", default="", help="optional release gate, e.g. 0.01:0.05")
args = parser.parse_args()

# Without --data the CLI uses the demo (built on first use): its pool, population set, columns and
# reference model (bbc-reference@champion, the demo's oracle reference), with FPRs the population can resolve.
argv = ["compare", "--demo-size", args.size]
if args.models:
    argv += ["--models", args.models]
if args.aliases:
    argv += ["--aliases", args.aliases]
if args.max_tpr_at_fpr:
    argv += ["--max-tpr-at-fpr", args.max_tpr_at_fpr]
sys.exit(main(argv))  # 0 = done, 1 = the audit broke, 2 = usage or input error, 3 = a version did not pass the gate
