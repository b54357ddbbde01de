"""What the language studies cost before they run: the language rows of `dphpo plan-cost` (issue 32).

Per job of rule `language_method` (study × method × seed), the trial-steps its search trains in
expectation (as for the vision rules, dphpo.studies.cost) times the expected Poisson batch B: the
examples processed. FLOP: 6·P·L per example for DP fine-tuning (a forward and a backward pass through
the P parameters an example flows through, L tokens), 4·P·L for DP-ZO (two forward passes). Time: FLOP
at an effective rate of DP fine-tuning measured by benchmarks/finetune.py (ghost clipping, which
pays a second backward, included: LM_TFLOPS), plus the start-up per job. The non-private reference
(`language_nonprivate`) trains every grid point without noise. Not counted: evaluation passes, the
hidden-state caches and the public pretraining.
"""

from __future__ import annotations

import torch

from dphpo.hpo.space import SearchSpace
from dphpo.studies import config as study_config
from dphpo.studies.cost import RuleCost, search_trial_steps
from dphpo.tasks.causal_lm import small_gpt2

#: Parameters an example flows through, of the hub and packaged models, read off their published
#: configs (no download here): GPT-2 small with its LM head untied (as ghost clipping trains it),
#: RoBERTa-base, OPT-13B, MiniLM-L6.
MODEL_PARAMETERS = {"gpt2": 162_349_056, "roberta-base": 124_645_632, "facebook/opt-13b": 12_853_473_280, "minilm": 22_713_216}
#: Parameters of one of their transformer layers: a classification study trains its top `train_layers`
#: on cached hidden states of the frozen bottom, so an example flows through those layers only.
LAYER_PARAMETERS = {"gpt2": 7_087_872, "roberta-base": 7_087_872, "facebook/opt-13b": 314_652_160, "minilm": 1_774_464}
#: Effective TFLOP/s of DP fine-tuning with ghost clipping (6·P·L per example), from
#: benchmarks/README.md: GPT-2 2x128 (0.93 M parameters, L 32) at 323 examples/s on a 2-core VM;
#: GPT-2 small (162 M, L 128, bf16 autocast) at 110 examples/s on one H100 and 154 on one H200.
LM_TFLOPS = {"cpu": 0.058, "h100": 13.7, "h200": 19.2}


def model_parameters(config: dict, spec: dict) -> int | None:
    """P of a study: the parameters one training example flows through (None where unknown)."""
    model = spec["model"]
    if model.get("pretrain"):  # the workflow's own small GPT-2: its architecture on the meta device
        pre = config["language"]["pretrain"][model["pretrain"]]
        with torch.device("meta"):
            net = small_gpt2(pre.get("vocab_size", 2048), pre.get("n_layer", 2), pre.get("n_embd", 128), pre.get("n_head", 4),
                             pre.get("n_positions", 128), 0)
        return sum(p.numel() for p in net.parameters())
    total = MODEL_PARAMETERS.get(model.get("name"))
    layers = model.get("train_layers", "all")
    if total is None or not study_config.uses_cache(spec) or not isinstance(layers, int):
        return total
    return min(total, layers * LAYER_PARAMETERS[model["name"]])


def language_costs(config: dict, tflops: float | None, overhead_s: float) -> list[RuleCost]:
    """`language_method` and `language_nonprivate` of the config's language studies: jobs, trial-steps,
    examples, FLOP, and seconds at `tflops` (None: not timed), with each study's slowest job
    (`RuleCost.longest_by_study`: the rules are generic, their runtime limits per study)."""
    seeds = len(config.get("seeds", [0]))
    rules: dict[str, RuleCost] = {}

    def add(rule: str, study: str, jobs: int, steps: float, examples: float, flop: float | None) -> None:
        cost = rules.setdefault(rule, RuleCost(rule, 0, 0.0, 0.0, None))
        cost.add(jobs, steps, flop, tflops and tflops * 1e12, overhead_s, examples, study=study)
        if flop is None:
            cost.note = "a model of unknown size is not timed"

    for name, spec in study_config.language_studies(config).items():
        cfg = study_config.language_config(config, spec, study_config.language_public_size(spec) or 1)
        space, targets = SearchSpace.from_config(cfg["search_space"]), len(study_config.language_targets(config, spec))
        training = spec.get("training") or {}
        batch, tokens = float(training.get("batch_size", 64)), float(spec["model"].get("max_len", 128))
        params = model_parameters(config, spec)
        # FLOP per example: a forward and a backward pass (DP-ZO: two forward passes) through P parameters, L tokens
        per_example = None if params is None else (4.0 if spec.get("trainer") == "dpzo" else 6.0) * params * tokens
        for method in spec["methods"]:
            steps = seeds * search_trial_steps(study_config.language_method_config(cfg, method), method, space, targets)
            add("language_method", name, seeds, steps, steps * batch, None if per_example is None else per_example * steps * batch)
        if spec.get("nonprivate", True):  # every grid point, without noise (dphpo.hpo.nonprivate)
            steps = float(sum(t for _, t in space.grid()))
            add("language_nonprivate", name, 1, steps, steps * batch, None if per_example is None else per_example * steps * batch)
    return list(rules.values())
