"""Training engines: batched full-batch DP-GD for linear heads."""

from dphpo.train.dpgd import TrialBatch, accuracy_counts, train_linear_dpgd

__all__ = ["TrialBatch", "accuracy_counts", "train_linear_dpgd"]
