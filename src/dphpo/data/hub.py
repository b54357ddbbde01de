"""Pinning Hugging Face hub content (models and `datasets` corpora): is a revision a commit?"""

from __future__ import annotations

import re
import warnings


def is_commit(revision: str) -> bool:
    """A full commit hash pins hub content; a branch such as `main` moves (warned, resolved commit recorded)."""
    pinned = bool(re.fullmatch(r"[0-9a-f]{40}", str(revision)))
    if not pinned:
        warnings.warn(f"hub revision {revision!r} is not a commit hash: the content it names can change; pin the commit", stacklevel=3)
    return pinned
