"""What a workflow job runs around the library: its log file, and the language jobs (one HPO method of
dphpo.hpo on one language study and seed, every target ε of the study in one job; the non-private
reference). The vision jobs are assembled in workflow/scripts from the same pieces (build_trainer,
writer.provenance, writer.write_result)."""

from __future__ import annotations

import contextlib
import logging
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path

import torch

from dphpo import layout
from dphpo.hpo import nonprivate
from dphpo.hpo import registry as hpo
from dphpo.privacy.randomness import NoiseScope, key_from_config
from dphpo.provenance import data_checksums
from dphpo.studies import config as study_config
from dphpo.studies import writer
from dphpo.studies.trainers import build_trainer


@contextlib.contextmanager
def job_log(log_path: str | Path, threads: int = 1) -> Iterator[logging.Logger]:
    """Send a job's stdout, stderr (progress bars included) and logging to its Snakemake log file."""
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(max(1, int(threads)))
    with open(log_path, "w", buffering=1) as fh, contextlib.redirect_stdout(fh), contextlib.redirect_stderr(fh):
        handler = logging.StreamHandler(fh)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root = logging.getLogger()
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        try:
            yield logging.getLogger("dphpo")
        except BaseException:

            traceback.print_exc(file=fh)
            raise
        finally:
            root.removeHandler(handler)
            sys.stderr.flush()


def language_noise_scope(config: dict, name: str, method: str, seed: int, trainer) -> NoiseScope:
    """The private draws of a language job: the key scoped by the study, the seed, the job's settings
    hash (`language_settings`' hash, the rule's params) and the data `trainer` reads (its checksums), so
    two versions of a study's config or data under one key draw independent noise, and the same config,
    data and key the same noise."""
    settings = study_config.language_settings_hash(config, name, method)
    return key_from_config(config).scope(study=name, seed=int(seed), settings=settings).over_data(data_checksums(trainer.provenance()))


def run_language_method(config: dict, name: str, method: str, seed: int, source, job_dir: str) -> list[dict]:
    """Run `method` (dphpo.hpo.registry) on language study `name`; per target ε of the study write, into
    the job's folder `job_dir` (layout.LANGUAGE_JOB_DIR), its release, model and internal log, staged as
    layout.language_staged names them (rule language_release puts each in its run folder)."""
    spec = study_config.language_study(config, name)
    targets = study_config.language_targets(config, spec)
    result_paths, model_paths, internal_paths = ([layout.language_staged(job_dir, e, k) for e in targets] for k in layout.LANGUAGE_STAGED)
    trainer, cfg = build_trainer(config, spec, source)
    cfg = study_config.language_method_config(cfg, method)
    noise = language_noise_scope(config, name, method, seed, trainer)
    outcomes = hpo.run_method(method, trainer, cfg, noise, progress=True)
    releases = []
    for r, result_path, model_path, internal_path in zip(outcomes, result_paths, model_paths, internal_paths, strict=True):
        prov = writer.provenance(cfg, trainer, r, noise=noise, seed=seed, study=name, method=method,
                                 settings_hash=study_config.language_settings_hash(config, name, method))
        releases.append(writer.write_result(r, result_path, model_path, prov, internal_path))
    return releases


def run_language_nonprivate(config: dict, name: str, source, result_path, model_path, internal_path) -> dict:
    """Every search-space grid point trained without noise (σ = 0), best on TEST: the ε = ∞ reference."""
    spec = study_config.language_study(config, name)
    trainer, cfg = build_trainer(config, spec, source)
    result = nonprivate.run(trainer, study_config.search_space(cfg), progress=True)
    prov = writer.provenance(cfg, trainer, study=name, method="nonprivate", settings_hash=study_config.language_settings_hash(config, name))
    return writer.write_result(result, result_path, model_path, prov, internal_path)
