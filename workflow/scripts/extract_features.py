"""Snakemake script: extract features of one dataset with one extractor into an HDF5 cache.

Expects `snakemake.wildcards.dataset`, `snakemake.wildcards.extractor`, `snakemake.output.features`
and `snakemake.log[0]`; logging and stderr (with the tqdm progress bar, refreshed every 10 s
when not on a terminal) go to the log file.
"""

import logging
import sys

import torch

from dphpo.features.build import build_feature_cache

snakemake = globals()["snakemake"]  # injected by Snakemake  # noqa: F821


def main() -> None:
    with open(snakemake.log[0], "w", buffering=1) as log_file:
        old_stderr, root = sys.stderr, logging.getLogger()
        handler = logging.StreamHandler(log_file)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        old_level = root.level
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        sys.stderr = log_file  # tqdm writes its progress bar to stderr
        try:
            threads = max(1, int(snakemake.threads))
            torch.set_num_threads(threads)
            params = getattr(snakemake, "params", None)
            device = getattr(params, "device", None) or snakemake.config.get("device", "auto") or "auto"
            logging.info("extract_features: dataset=%s extractor=%s threads=%d device=%s",
                         snakemake.wildcards.dataset, snakemake.wildcards.extractor, threads, device)
            attrs = build_feature_cache(
                snakemake.wildcards.dataset,
                snakemake.wildcards.extractor,
                dict(snakemake.config),
                snakemake.output.features,
                device=device,
                progress=True,
                # the checkpoint where the rule found it (prefixed when the workflow is a `module`)
                checkpoint=snakemake.input.pretrained or None,
            )
            logging.info("done: n_train=%s n_test=%s feature_dim=%s content_sha256=%s",
                         attrs["n_train"], attrs["n_test"], attrs["feature_dim"], attrs["content_sha256"])
        except Exception:
            logging.exception("feature extraction failed")
            raise
        finally:
            sys.stderr = old_stderr
            root.removeHandler(handler)
            root.setLevel(old_level)


main()
