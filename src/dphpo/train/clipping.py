"""Per-example clipping that no single record can break (docs/privacy.md §2, "One record's term").

The clipped sum Σᵢ min(1, C/‖gᵢ‖)·gᵢ has sensitivity C only if every term is a finite vector of norm at
most C. One record's content can break that: huge (finite) features overflow ‖xᵢ‖ or the logits (a NaN
residual), a reduced-precision forward pass can overflow. Its norm is then NaN or inf, and since 0·inf and
0·NaN are NaN, one such term turns the whole release into NaN, which reveals that the record is there.
So a term whose norm is not finite is dropped: factor 0 and its row zeroed before the sum. The decision
reads that record alone, so the sum still changes by at most C when one record is added or removed.
"""

from __future__ import annotations

import torch


def row_norms(x: torch.Tensor) -> torch.Tensor:
    """‖xᵢ‖ of each row of a 2-D tensor; a row whose plain norm overflows (entries finite, ‖xᵢ‖² beyond the
    dtype's range) is measured scaled by its largest entry, so that it is clipped rather than dropped."""
    norms = x.norm(dim=1)
    over = torch.isinf(norms)
    if bool(over.any()):  # one check per tensor (a trainer computes its feature norms once)
        rows = x[over]
        top = rows.abs().amax(dim=1, keepdim=True)
        norms[over] = top.squeeze(1) * (rows / top).norm(dim=1)
    return norms


def clip_factors(norms: torch.Tensor, clip_norm: float | torch.Tensor) -> torch.Tensor:
    """cᵢ = min(1, C/‖gᵢ‖), and 0 where ‖gᵢ‖ is not finite (the term is dropped)."""
    return torch.clamp(clip_norm / norms.clamp_min(1e-12), max=1.0).masked_fill_(~torch.isfinite(norms), 0.0)


def drop_nonfinite_(rows: torch.Tensor, norms: torch.Tensor) -> torch.Tensor:
    """`rows` (one per example along dim 0) with those whose norm is not finite set to 0, in place: a zero
    factor alone still gives 0·inf = NaN in the sum."""
    return rows.masked_fill_(~torch.isfinite(norms).view(-1, *[1] * (rows.dim() - 1)), 0.0)
