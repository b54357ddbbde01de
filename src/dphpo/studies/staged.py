"""A language job's releases put in their run folders (rule language_release, in the main process).

One job runs a method on a language study for every target ε of the study (one search, one noise
scope), and Snakemake gives every job of a rule the same output patterns: so the job writes its
folder (layout.LANGUAGE_JOB_DIR, files named by layout.language_staged) and one light job per target ε
links each file to its run folder (layout.LANGUAGE_RESULT, _MODEL, _INTERNAL). No torch here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from dphpo import io, layout


def release_language_run(job_dir: str, eps: str, targets: Sequence[str], log_path: str | None = None) -> None:
    """Target ε `eps` (its path label) of the job that wrote `job_dir`, in its run folder: `targets` are
    its result.json, model and internal log, each the same file as the staged one (a hard link). The log
    (`log_path`) names each staged file and its place."""
    lines = []
    for name, target in zip(layout.LANGUAGE_STAGED, targets, strict=True):
        staged = Path(layout.language_staged(job_dir, eps, name))
        if not staged.is_file():
            raise FileNotFoundError(f"{staged}: the language job wrote no such file (did the study's target_eps change? "
                                    f"rerun the job: snakemake --forcerun {job_dir})")
        io.link_file(staged, target)
        lines.append(f"{staged} -> {target}")
    if log_path is not None:
        io.write_text(log_path, "\n".join(lines) + "\n")
