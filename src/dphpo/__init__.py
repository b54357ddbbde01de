"""dphpo: reproducible, fully accounted differentially private hyperparameter optimization."""

__version__ = "0.1.0"
