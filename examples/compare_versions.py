"""Compare every version (or some aliases) of a registered model against one reference.

    pip install -e '.[demo]'
    python examples/compare_versions.py --size small
    python examples/compare_versions.py --aliases champion,candidate

One parent run with a nested run per version; the parent holds tables/comparison.csv
(attack x model version: AUC with CI, TPR at each FPR), plots/comparison.png and one ROC
overlay per attack. The reference signals are computed once (the signal cache). The same
from a shell: ``mlflow-mia compare --models bbc-target ...`` or
``mlflow run . -e compare --env-manager local``.
"""

import argparse
import sys

import mlflow

from mlflow_mia.demo.build import build_demo
from mlflow_mia.integrations.cli import main

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--size", choices=("default", "small"), default="default", help="demo size")
parser.add_argument("--aliases", default="", help="aliases to compare, e.g. champion,candidate (default: all)")
parser.add_argument("--max-tpr-at-fpr", default="", help="optional release gate, e.g. 0.01:0.05")
args = parser.parse_args()

spec = build_demo(size=args.size)
model_name = spec.target_uri.split("/")[-1].split("@")[0]  # models:/bbc-target@candidate -> bbc-target
mlflow.set_experiment("mlflow-mia examples")
argv = ["compare", "--models", model_name, "--reference", spec.reference_uri,
        "--data", str(spec.pool_path), "--population", str(spec.population_path),
        "--text-column", spec.text_column, "--label-column", spec.label_column,
        "--id-column", spec.id_column, "--group-column", spec.group_column]
if args.aliases:
    argv += ["--aliases", args.aliases]
if args.max_tpr_at_fpr:
    argv += ["--max-tpr-at-fpr", args.max_tpr_at_fpr]
sys.exit(main(argv))  # 0 = done, 1 = a version failed the release gate
