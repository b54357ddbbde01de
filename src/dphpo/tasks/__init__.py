"""Tasks of the language studies: what a private trainer fine-tunes, on which data, and how it is scored.

A task holds the private train/test data (tensors), builds a fresh model from the same public
starting point for every trial (`build_model`), gives per-example losses of a batch
(`example_losses(module, indices)`, the privacy unit is one example: a text or a sequence) and
evaluates a model on a split (`evaluate`: the metric and the sum of per-example scores in [0, 1]
that honest selection releases). Model and data live on one device (`to(device)`: moved once, its
trainer's `training.device`; dphpo.tasks.device). Trainers (dphpo.train.finetune, dphpo.train.dpzo)
only see this.
"""

from dphpo.tasks.causal_lm import CausalLMTask
from dphpo.tasks.classification import SequenceClassificationTask
from dphpo.tasks.question_answering import QuestionAnsweringTask

__all__ = ["CausalLMTask", "QuestionAnsweringTask", "SequenceClassificationTask"]
