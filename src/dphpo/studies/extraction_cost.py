"""What feature extraction costs before it runs: the `extract_features` rows of `dphpo plan-cost` (issue 32).

One job per (dataset, extractor) pair the study target reads. Its inputs are the dataset's published
train and test sizes (the registry's; the user's own data: the declared `public_n_train` and a quarter
of it for the test split), capped by `datasets.<name>.max_train` / `max_test`. Its FLOP are the inputs
times one forward pass of the extractor, counted by torch's FlopCounterMode on the `meta` device (the
architecture at its resolution: no weights, no memory): a timm model or EfficientNet-Lite0 at its
resolution, a network of `pretraining.<name>` at that section's resolution, MiniLM at TEXT_TOKENS
tokens per text; raw pixels and the user's own features cost none. Time: the FLOP at an extraction
rate measured here (`measure_extract_gflops`: EfficientNet-Lite0 with random weights, fp32, a second)
or a GPU's from benchmarks/README.md (`EXTRACT_GFLOPS`), plus the start-up per job. The rate is a
convolutional network's, so a transformer extractor, which runs nearer the GEMM rate, is over-estimated
(the safe side of a runtime limit).
"""

from __future__ import annotations

import time

import torch
from torch.utils.flop_counter import FlopCounterMode

from dphpo.data.files import dataset_options
from dphpo.data.registry import DATASETS
from dphpo.studies import config as study_config
from dphpo.studies.cost import RuleCost, extractor_network, published_train_size

RULE = "extract_features"
#: Tokens per text a MiniLM extraction is costed at (a tweet's length; texts are batched by length, so
#: little padding is computed).
TEXT_TOKENS = 32
#: The test split of the user's own data, as a share of its declared training size (its size is private).
OWN_TEST_SHARE = 0.25
#: Extraction rate of one GPU, GFLOP/s: EfficientNet-Lite0 at 224 px fp32, 12,330 images/s on one H100
#: (benchmarks/README.md) at 0.77 GFLOP per image; the H200 taken as the H100.
EXTRACT_GFLOPS = {"h100": 9_500.0, "h200": 9_500.0}
#: MiniLM-L6 (all-MiniLM-L6-v2): BERT of 6 layers, width 384, 12 heads, MLP 1536.
MINILM = {"vocab_size": 30522, "hidden_size": 384, "num_hidden_layers": 6, "num_attention_heads": 12,
          "intermediate_size": 1536}


def extraction_pairs(config: dict) -> list[tuple[str, str]]:
    """The (dataset, extractor) feature caches the study target reads, in order, each once."""
    return list(dict.fromkeys((d, e) for d, e, _, _ in study_config.study_jobs(config)))


def inputs_of(config: dict, dataset: str) -> int:
    """Inputs one extraction encodes: the published train and test sizes, capped by max_train / max_test."""
    spec, n_train = DATASETS.get(dataset), published_train_size(config, dataset)
    n_test = int(spec.public_n_test or 0) if spec and spec.public_n_test is not None else int(OWN_TEST_SHARE * n_train)
    opts = dataset_options(config, dataset)
    cap = {"train": opts.get("max_train"), "test": opts.get("max_test")}
    return min(n_train, cap["train"] or n_train) + min(n_test, cap["test"] or n_test)


def forward_flop(config: dict, extractor: str) -> float | None:
    """FLOP of one input through the extractor (0: raw pixels or own features; None: not known here)."""
    spec = (config.get("extractors") or {}).get(extractor) or {}
    kind = spec.get("kind", extractor)
    if kind in ("raw", "identity"):
        return 0.0
    with torch.device("meta"), FlopCounterMode(display=False) as counter:
        if kind == "minilm":
            from transformers import BertConfig, BertModel

            BertModel(BertConfig(**MINILM)).eval()(torch.zeros(1, TEXT_TOKENS, dtype=torch.long))
        else:
            net, resolution = extractor_network(config, spec, kind)
            if net is None:
                return None
            net.eval()(torch.empty(1, 3, resolution, resolution))
    return float(counter.get_total_flops())


def measure_extract_gflops(batch: int = 32, resolution: int = 64) -> float:
    """GFLOP/s of EfficientNet-Lite0 (random weights, fp32) here: one warm-up pass, then the best of two."""
    import timm

    net = timm.create_model("tf_efficientnet_lite0", pretrained=False, num_classes=0).eval()
    x = torch.rand(batch, 3, resolution, resolution, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        net(x)
        best = float("inf")
        for _ in range(2):
            t0 = time.perf_counter()
            net(x)
            best = min(best, time.perf_counter() - t0)
    flop = forward_flop({"extractors": {"lite0": {"kind": "efficientnet_lite0_packaged", "resolution": resolution}}}, "lite0")
    return batch * flop / best / 1e9


def extraction_jobs(config: dict) -> list[tuple[str, str, int, float | None]]:
    """(dataset, extractor, inputs, FLOP per input) of each extraction job the study target runs."""
    return [(d, e, inputs_of(config, d), forward_flop(config, e)) for d, e in extraction_pairs(config)]


def extraction_costs(jobs: list[tuple[str, str, int, float | None]], gflops: float | None, overhead_s: float) -> list[RuleCost]:
    """The `extract_features` rule of `extraction_jobs`: its jobs, the inputs they encode (`examples`), FLOP
    and seconds at `gflops` (None: not timed)."""
    if not jobs:
        return []
    rule = RuleCost(RULE, 0, 0.0, 0.0, None)
    for _, _, n, per_input in jobs:
        rate = gflops * 1e9 if gflops else (1.0 if per_input == 0 else None)  # raw pixels: start-up only, at any rate
        rule.add(1, 0.0, None if per_input is None else n * per_input, rate, overhead_s, examples=float(n))
        if per_input is None:
            rule.note = "an extractor of unknown architecture is not timed"
    return [rule]
