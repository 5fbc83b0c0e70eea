"""Audit a registered model version with the Python API and log the result to MLflow.

    pip install -e '.[demo]'
    python examples/audit_registered_model.py --size small     # builds the BBC demo on first use
    mlflow ui --backend-store-uri sqlite:///mlflow.db           # then open the run

For your own model, replace the demo spec by your URIs and tables: any of
models:/name/version, models:/name@alias, runs:/<run_id>/<path> or a local folder.
The same audit from a shell: ``mlflow-mia audit --target ... --reference ...``.
"""

import argparse

import mlflow

from mlflow_mia.audits.membership import run_audit
from mlflow_mia.config import AuditConfig
from mlflow_mia.data import AuditDataset, PopulationSet
from mlflow_mia.demo.build import build_demo
from mlflow_mia.hashing import resolve_hash_key
from mlflow_mia.tracking.audit_log import log_audit
from mlflow_mia.tracking.log_settings import LogSettings
from mlflow_mia.tracking.verdict import audit_run_name, audit_verdict
from mlflow_mia.models.resolve import resolve_model
from mlflow_mia.signals.cache import default_cache_dir

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--size", choices=("default", "small"), default="default", help="demo size")
args = parser.parse_args()

spec = build_demo(size=args.size)  # registers bbc-target@candidate and bbc-reference@champion (an oracle reference)
target = resolve_model(spec.target_uri)  # alias -> models:/bbc-target/<version>
reference = resolve_model(spec.reference_uri, role="reference")
pool = AuditDataset.from_frame(spec.pool_path, text_column=spec.text_column, label_column=spec.label_column,
                               id_column=spec.id_column, group_column=spec.group_column)
population = PopulationSet.from_frame(spec.population_path, text_column=spec.text_column,
                                      group_column=spec.group_column)
# Energy signal with 10 masks; the small demo's 300 population texts resolve FPRs down to 0.01.
fprs = (0.1, 0.01, 0.001) if args.size == "default" else (0.1, 0.01)
config = AuditConfig(attacks=("loss", "likelihood_ratio"), metrics={"fprs": fprs})

mlflow.set_experiment("mlflow-mia")
with mlflow.start_run() as run:
    result = run_audit(target.lm, pool, population, references=[reference.lm], config=config,
                       cache=default_cache_dir())  # re-runs and shared references are free
    # The hash key: $MLFLOW_MIA_HASH_KEY, else a random one that is not kept (mlflow_mia.hashing).
    log_audit(result, settings=LogSettings(
        hash_key=resolve_hash_key(), model_version=target.registry, population=population,
        params={**target.params("target"), **reference.params("reference")},
        run_name=audit_run_name(target.resolved_uri, reference.resolved_uri)))

print(audit_verdict(result).line())  # no gate here: the headline attack's AUC interval decides
for name, report in result.attacks.items():
    print(f"{name:>18}: AUC {report.roc.auc:.3f}, TPR at FPR 0.01 {report.tpr_at_fpr[0.01]:.3f}")
print(f"run {run.info.run_id}; registry tags on {target.registered_name} v{target.version}:",
      {k: v for k, v in mlflow.MlflowClient().get_model_version(*target.registry).tags.items()
       if k.startswith("mia.") and k.endswith(".auc")})
