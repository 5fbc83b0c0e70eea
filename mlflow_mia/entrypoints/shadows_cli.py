"""``mlflow-mia train-shadows``: shadow models of your own target, trained with its recipe, for online LiRA.

A thin front end of :func:`mlflow_mia.demo.shadows.train_shadows`: the recipe from a JSON
file (:meth:`~mlflow_mia.demo.shadows.ShadowRecipe.from_json`), the candidate texts from a
table, the hash key from ``--hash-key-file`` (the audits' option) or ``$MLFLOW_MIA_HASH_KEY`` (a random key is
refused: the record would be unreadable), the audited pool from ``--pool`` (the record is bound to it
and to the shadows' weights). The record it writes is what ``mlflow-mia audit
--shadow-record`` reads, with the printed shadow URIs as ``--reference``.
"""

from __future__ import annotations

import argparse

from mlflow_mia.data import AuditDataset, load_table
from mlflow_mia.hashing import resolve_hash_key
from mlflow_mia.options.values import blank

__all__: list[str] = []


def _whole(flag: str, minimum: int):
    """An argparse type: an int >= ``minimum``, written as ``4`` or ``4.0`` (MLproject has no int type: its
    ``float`` parameters reach the command as ``4.0`` when given so)."""

    def convert(text: str) -> int:
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        if not value.is_integer() or value < minimum:
            raise argparse.ArgumentTypeError(f"{flag} must be a whole number >= {minimum}, got {text!r}")
        return int(value)

    convert.__name__ = flag
    return convert


def add_train_shadows_flags(p: argparse.ArgumentParser) -> None:
    """The flags of ``train-shadows`` (the command has no audit options)."""
    p.add_argument("--recipe", metavar="PATH", help="the target's recipe, JSON: {\"base_model\": URI or folder, "
                   "\"train\": {epochs or steps, batch_size, learning_rate, max_length, ...}, \"dp\": {...} or null} "
                   "(mlflow_mia.demo.shadows.ShadowRecipe)")
    p.add_argument("--candidates", metavar="PATH", help="candidate texts (.csv, .jsonl, .json or .parquet): your "
                   "audit's pool and population (every text online LiRA scores) plus other in-domain text; each "
                   "shadow trains on a random half")
    p.add_argument("--candidates-text-column", default="text", metavar="NAME", help="text column of --candidates "
                   "(default: text)")
    p.add_argument("--candidates-group-column", metavar="NAME", help="group id column of --candidates (e.g. "
                   "article or user): a shadow trains on all or none of a group's texts (default: each text alone)")
    p.add_argument("--count", type=_whole("--count", 1), default=16, metavar="K", help="shadow models, even, >= 4 "
                   "for lira_online (default: 16)")
    p.add_argument("--name", metavar="NAME", help="registered names NAME-0 ... NAME-<K-1>, alias champion (letters, "
                   "digits and _ . -); refused when their champion holds another set's shadows, unless --force")
    p.add_argument("--record", metavar="PATH", help="where to write the shadow record (JSON of keyed hashes, "
                   "never the texts): give it to mlflow-mia audit --shadow-record. Its folder must exist (checked "
                   "before training); an existing file is replaced only when it is these shadows' record, or with "
                   "--force")
    p.add_argument("--halves-seed", type=_whole("--halves-seed", 0), default=0, metavar="SEED",
                   help="seed of the halves (default: 0)")
    p.add_argument("--pool", metavar="PATH", help="the audited pool (.csv, .jsonl, .json or .parquet: texts and "
                   "member labels, as mlflow-mia audit --data reads it): the record is bound to its keyed digest, "
                   "and an audit of another pool refuses it; its texts must be candidates")
    p.add_argument("--pool-text-column", default="text", metavar="NAME", help="text column of --pool (default: text)")
    p.add_argument("--pool-label-column", default="is_member", metavar="NAME", help="member label column (1/0) of "
                   "--pool (default: is_member)")
    p.add_argument("--threads", type=int, metavar="N", help="torch CPU threads while training")
    p.add_argument("--force", action="store_true", help="train every shadow even when registered with its key, "
                   "replace the champion of another set's shadows under --name, and overwrite --record")


def cmd_train_shadows(args) -> int:
    """Train (or resume) the shadows, write the record, print the audit's ``--reference`` and ``--shadow-record``.

    Raises
    ------
    ValueError
        A missing flag, a missing text, group or label column, and every error of
        :func:`~mlflow_mia.demo.shadows.train_shadows` (duplicates, no kept key, a pool text that is not a
        candidate).
    """
    from mlflow_mia.demo.shadows import ShadowRecipe, check_shadow_name, train_shadows

    missing = [f"--{f.replace('_', '-')}" for f in ("recipe", "candidates", "name", "record", "pool")
               if not blank(getattr(args, f, None))]
    if missing:
        raise ValueError(f"train-shadows needs {', '.join(missing)}: e.g. mlflow-mia train-shadows --recipe "
                         "recipe.json --candidates candidates.csv --count 16 --name my-shadow --record shadows.json "
                         "--pool pool.csv")
    check_shadow_name(args.name)  # before anything is read
    recipe = ShadowRecipe.from_json(args.recipe)
    table = load_table(args.candidates, what="candidates")
    text_column, group_column = args.candidates_text_column, blank(args.candidates_group_column)
    columns = [text_column] + ([group_column] if group_column else [])
    for column in columns:
        if column not in table.columns:
            raise ValueError(f"the candidates have no column {column!r} (columns: {list(table.columns)}); name it "
                             "with --candidates-text-column / --candidates-group-column")
    groups = table[group_column].astype(str).tolist() if group_column else None
    pool = AuditDataset.from_frame(args.pool, text_column=args.pool_text_column, label_column=args.pool_label_column)
    key = args.hash_key_file or resolve_hash_key()  # --hash-key-file is read (and checked) when parsed
    built = train_shadows(table[text_column].astype(str).tolist(), recipe=recipe, count=args.count,
                          name=args.name, groups=groups, seed=args.halves_seed, key=key, record_path=args.record,
                          force=args.force, replace_others=args.force, pools=[pool],
                          progress=not getattr(args, "no_progress", False), num_threads=args.threads)
    print(f"{len(built.uris)} shadows ({len(built.trained)} trained now); record {args.record}")
    print(f"audit with: --reference {','.join(built.uris)} --shadow-record {args.record}")
    return 0
