"""`training.physical_batch: auto` of the language trainers: the largest chunk of a Poisson batch that fits
the device, from the device's memory and the model's size (dphpo.train.finetune, dphpo.train.dpzo).

A Poisson batch is processed in chunks of `physical_batch` examples; the clipped sum is the same for any
chunking (memory only; the chunks' sums are added in another order, so two chunkings agree to float
rounding, not bit for bit). An int keeps its meaning; `auto` is resolved once, when the trainer has put
its task on the device, from public facts only: the device's memory, the model's architecture and
parameter count, the sequence length and the expected batch size q·n_public (never the private count).

The estimate (bytes; b = the physical batch; s = sequence length, h = hidden size, a = attention heads,
L = transformer layers, V = the output vocabulary of a per-token head, f = bytes of a forward-pass value):

    fixed       = the task on the device (the prototype's parameters in their dtypes, buffers, data tensors)
                + a trial's model beside it (`build_model`: the trainable parameters and buffers where the
                  frozen weights are shared with the prototype, as the tasks of dphpo.tasks build it)
                + trainable × 4 × (TRAINABLE_STATE + OPTIMIZER_STATE[optimizer])     (fine-tuning)
                + trainable × 4 + the trainable parameters' bytes    (DP-ZO: the step's direction z and θ,
                                                                    the copy every chunk is restored from)
    per_example = (L + BACKWARD_LAYERS) × (ACT_TOKEN·s·h + ACT_SCORE·a·s²) × f / 2   (activations)
                + Σ_adapters s × d_in × 4      (a LoRA adapter casts its input to its fp32 dtype: a copy,
                                                 where the frozen layer's dtype differs: OPT-13B's bf16)
                + s × V × (f + 4 · LOGITS_FP32)                     (the logits and their fp32 copies)
                + GHOST_GRAMS × s² × 4                              (clipping: ghost)
                + trainable × 4 × (HOOKS_BF16 if bf16 else 1)       (clipping: hooks)
    physical_batch = min(⌈q·n_public⌉, ⌊(SAFETY × available − fixed) / per_example⌋) ≥ 1

- Activations: Korthikanti et al. 2022 ("Reducing activation recomputation in large transformer models",
  eq. 1): one transformer layer stores s·h·34 + 5·a·s² bytes per sequence with 16-bit activations
  (1-byte dropout masks included: an upper bound for our dropout-free models) and eager attention's
  s × s scores per head (an upper bound where SDPA/flash attention does not keep them); scaled by f/2
  for fp32 activations. One more layer's worth (BACKWARD_LAYERS) is the backward pass's working set.
  f is 2 when the forward pass runs under bf16 autocast (`precision`) or the model's weights are mostly
  16-bit (OPT-13B's bf16 frozen weights), else 4.
- Ghost clipping (Li et al. 2022, opacus) keeps no per-example gradient: the activations and backprops it
  reads are the ones autograd keeps anyway (the graph is retained for the second backward, counted
  above), and a linear layer's ghost norm forms two s × s fp32 Gram matrices per example, one layer at a
  time (GHOST_GRAMS). We assume nothing else per example.
- Hooks (opacus `GradSampleModule`) materialize every trainable parameter's gradient per example: 4 bytes
  each in fp32; with bf16 the bf16 `grad_sample` (2 bytes) and its fp32 copy (4 bytes) live together
  (`clipped_grad_sum`): × HOOKS_BF16 = 1.5.
- DP-ZO runs forward passes without a graph: one layer's activations (ZO_LAYERS) and the logits with
  LOGITS_FP32_ZO fp32 copies, no backward.
- Data placement (`data_device`): the task's data tensors, sized for n_public, go on the card only when
  they take at most DATA_SHARE of its memory; otherwise (QQP's and MNLI's cached hidden states: 143 and
  154 GB, more than any card) they stay in host memory, each batch is copied to the card, and `fixed`
  counts no data.
- The estimate covers training; evaluation (`eval_batch`, generation's key-value cache) runs after a
  trial's training has freed its activations. SAFETY leaves room for the CUDA context, allocator
  fragmentation and what the estimate leaves out.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field, replace

import psutil
import torch
from torch import nn

from dphpo.errors import ConfigError

log = logging.getLogger(__name__)

KEY = "language.studies[].training.physical_batch"
GB = 1e9
#: the share of the available memory the estimate may fill
SAFETY = 0.8
#: data tensors larger than this share of a card's memory stay in host memory (`data_device`)
DATA_SHARE = 0.5
#: Korthikanti et al. 2022 eq. 1: bytes per token × hidden unit and per attention score of one layer, 16-bit
ACT_TOKEN = 34
ACT_SCORE = 5
#: the backward pass's working set: one more layer's activations (gradients of the layer being differentiated)
BACKWARD_LAYERS = 1
#: DP-ZO (no graph): at most one layer's activations alive at once
ZO_LAYERS = 1
#: fp32 tensors of the logits' size beside the logits: the fp32 cast (or fp32 logits), log-softmax, its gradient
LOGITS_FP32 = 3
LOGITS_FP32_ZO = 2  # no gradient
#: ghost clipping: the s × s activation and backprop Gram matrices of one linear layer, fp32, per example
GHOST_GRAMS = 2
#: fp32 copies of the trainable parameters in a fine-tuning step beside the optimizer's state: the
#: accumulated clipped sum, one chunk's sum (or `.grad`), the step's noise moved to the device
TRAINABLE_STATE = 3
OPTIMIZER_STATE = {"sgd": 1, "adam": 2}  # momentum; Adam's two moments
#: hooks with bf16: the bf16 per-example gradients and their fp32 copies (2 + 4 bytes instead of 4)
HOOKS_BF16 = 1.5

LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers")
HIDDEN_KEYS = ("hidden_size", "n_embd", "d_model")
HEAD_KEYS = ("num_attention_heads", "n_head")


def check_physical_batch(value, where: str = KEY):
    """`value` if it is an int ≥ 1 or `auto`; a ConfigError at `where` otherwise."""
    if value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        return value
    raise ConfigError(f"{where}: expected an int >= 1 or auto (the largest chunk the device's memory holds), "
                      f"got {value!r}")


# --------------------------------------------------------------------------------------------
# the model


def _first(config, keys: tuple[str, ...]) -> int | None:
    for key in keys:
        value = getattr(config, key, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _config(model: nn.Module):
    """The model's Hugging Face config, else the first submodule's (a stack of transformer layers)."""
    if getattr(model, "config", None) is not None:
        return model.config
    for module in model.modules():
        config = getattr(module, "config", None)
        if config is not None and _first(config, HIDDEN_KEYS):
            return config
    return None


@dataclass(frozen=True)
class Architecture:
    """What the activation estimate reads of a model: layers, hidden size, heads, per-token output width."""

    layers: int
    hidden: int
    heads: int
    vocab: int  # 0: no per-token head (a classifier's per-example logits are negligible)

    @classmethod
    def of(cls, model: nn.Module) -> Architecture:
        """From the model's HF config where it has one (`n_layer`/`num_hidden_layers`, `hidden_size`/`n_embd`,
        `num_attention_heads`/`n_head`); a module without one (the top layers of an encoder) counts the layers
        of its longest nn.ModuleList and reads the size of its layers' config; a plain module: one layer as
        wide as its widest linear layer, no attention."""
        own = getattr(model, "config", None)
        config = _config(model)
        lists = [len(m) for m in model.modules() if isinstance(m, nn.ModuleList)]
        layers = (_first(own, LAYER_KEYS) if own is not None else None) or max(lists, default=0) or 1
        linears = [max(m.in_features, m.out_features) for m in model.modules() if isinstance(m, nn.Linear)]
        hidden = (_first(config, HIDDEN_KEYS) if config is not None else None) or max(linears, default=1)
        heads = (_first(config, HEAD_KEYS) if config is not None else None) or 0
        head = model.get_output_embeddings() if callable(getattr(model, "get_output_embeddings", None)) else None
        vocab = int(head.weight.shape[0]) if getattr(head, "weight", None) is not None else 0
        return cls(int(layers), int(hidden), int(heads), vocab)


def tensor_bytes(tensors) -> int:
    """Bytes of distinct tensors (a tied weight once), on any device, `meta` included."""
    seen, total = set(), 0
    for t in tensors:
        if id(t) not in seen:
            seen.add(id(t))
            total += t.numel() * t.element_size()
    return total


def model_bytes(model: nn.Module) -> int:
    return tensor_bytes([*model.parameters(), *model.buffers()])


def forward_bytes(model: nn.Module, compute_dtype: torch.dtype) -> int:
    """f: 2 under bf16 autocast or when most of the weights are 16-bit, else 4."""
    if compute_dtype in (torch.bfloat16, torch.float16):
        return 2
    count: dict[torch.dtype, int] = {}
    for p in model.parameters():
        count[p.dtype] = count.get(p.dtype, 0) + p.numel()
    dominant = max(count, key=count.get) if count else torch.float32
    return 2 if dominant in (torch.bfloat16, torch.float16) else 4


def adapter_copies(model: nn.Module, seq_len: int) -> int:
    """Bytes per example of the inputs LoRA adapters cast to their own dtype (peft: x.to(lora_A's dtype),
    kept for the backward) where it differs from the frozen layer's."""
    total = 0
    for module in model.modules():
        lora_a, base = getattr(module, "lora_A", None), getattr(module, "base_layer", None)
        if not isinstance(lora_a, nn.ModuleDict) or not hasattr(base, "weight"):
            continue
        for adapter in lora_a.values():
            if adapter.weight.dtype != base.weight.dtype:
                total += seq_len * adapter.weight.shape[1] * adapter.weight.element_size()
    return total


# --------------------------------------------------------------------------------------------
# the estimate


@dataclass(frozen=True)
class MemoryEstimate:
    """fixed + b × per_example bytes for a physical batch of b examples; `parts` names the terms (bytes)."""

    fixed: int
    per_example: int
    parts: dict = field(default_factory=dict)
    available: int | None = None  # the memory the run may use, where the estimate was resolved against it

    def largest_batch(self, available: float, cap: int) -> int:
        """The largest b ≤ cap with fixed + b·per_example ≤ SAFETY·available; a ConfigError when b = 1 does not fit."""
        budget = SAFETY * float(available)
        fits = math.floor((budget - self.fixed) / self.per_example) if self.per_example > 0 else cap
        if fits < 1:
            need = (self.fixed + self.per_example) / GB
            raise ConfigError(
                f"{KEY}: auto: even one example does not fit: the estimate needs {need:.1f} GB "
                f"({self.fixed / GB:.1f} GB fixed + {self.per_example / GB:.2f} GB per example) of "
                f"{budget / GB:.1f} GB "
                f"usable ({SAFETY:g} of {float(available) / GB:.1f} GB available on the device); use clipping: ghost "
                "(no per-example gradients), LoRA adapters (model.lora), a smaller model.max_len, or a larger device"
            )
        return int(max(1, min(fits, cap)))

    def describe(self) -> dict:
        out = {"fixed_gb": round(self.fixed / GB, 3), "per_example_gb": round(self.per_example / GB, 4),
               "parts_gb": {k: round(v / GB, 4) for k, v in self.parts.items()}, "safety": SAFETY}
        return out | ({"available_gb": round(self.available / GB, 3)} if self.available is not None else {})


def estimate(model: nn.Module, seq_len: int, settings, *, device: torch.device | str = "cpu", data_bytes: int = 0,
             trial_copy: int | None = None) -> MemoryEstimate:
    """The memory of a training run of `settings` (FinetuneSettings or DPZOSettings) on `model` (the task's
    prototype, on any device, `meta` included) with sequences of `seq_len` tokens. `data_bytes`: the task's
    data tensors on the device; `trial_copy`: the bytes a trial's model adds beside the prototype (None: its
    trainable parameters and buffers, the frozen weights shared as the tasks of dphpo.tasks build it)."""
    device = torch.device(device)
    s, arch = int(seq_len), Architecture.of(model)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    compute = settings.compute_dtype(device)
    f = forward_bytes(model, compute)
    if trial_copy is None:
        trainable_params = [p for p in model.parameters() if p.requires_grad]
        trial_copy = tensor_bytes(trainable_params) + tensor_bytes(list(model.buffers()))
    layer = (ACT_TOKEN * s * arch.hidden + ACT_SCORE * arch.heads * s * s) * f // 2
    fixed = {"task": model_bytes(model) + int(data_bytes), "trial_model": int(trial_copy)}
    if hasattr(settings, "clipping"):  # fine-tuning: backprop through the whole model
        fixed["trainable_state"] = trainable * 4 * (TRAINABLE_STATE + OPTIMIZER_STATE[settings.optimizer])
        per = {"activations": (arch.layers + BACKWARD_LAYERS) * layer, "adapter_inputs": adapter_copies(model, s),
               "logits": s * arch.vocab * (f + 4 * LOGITS_FP32)}
        if settings.clipping == "ghost":
            per["ghost_grams"] = GHOST_GRAMS * s * s * 4
        else:
            per["per_example_gradients"] = int(trainable * 4 * (HOOKS_BF16 if compute == torch.bfloat16 else 1))
    else:  # DP-ZO: forward passes without a graph
        fixed["direction"] = trainable * 4
        fixed["theta"] = tensor_bytes([p for p in model.parameters() if p.requires_grad])  # dphpo.train.dpzo: θ of the step
        per = {"activations": ZO_LAYERS * layer, "logits": s * arch.vocab * (f + 4 * LOGITS_FP32_ZO)}
    return MemoryEstimate(sum(fixed.values()), max(1, sum(per.values())), fixed | per)


def device_bytes(device: torch.device | str) -> int:
    """The memory of `device`, a public fact of the machine: a CUDA card's total memory, the CPU's RAM.
    Not what is free now: once the task's data are on the device, free memory depends on the private
    count, and the physical batch (recorded in provenance) must not."""
    device = torch.device(device)
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    if device.type == "cpu":
        return int(psutil.virtual_memory().total)
    raise ConfigError(f"{KEY}: auto: no memory to measure on device {device}; set an int")


def require_resolved(settings) -> None:
    """A training loop's guard: `physical_batch: auto` is the trainer's to resolve (`resolve_physical_batch`)."""
    if settings.physical_batch == "auto":
        raise ValueError("physical_batch: auto is resolved by the trainer (dphpo.train.memory.resolve_physical_batch)")


def data_device(device: torch.device | str, data_bytes: int, available: float | None = None) -> torch.device:
    """Where a task's data tensors live when it computes on `device`: there, when they take at most DATA_SHARE
    of its memory (`available`, default `device_bytes`), else in host memory (the CPU), each batch copied
    over. Public facts only: the data sized for the declared public size (`public_data_bytes`) and the
    card's total memory. On the CPU, and on a device without memory to measure (`meta`), the data stay
    with the model."""
    device = torch.device(device)
    if device.type == "cpu":
        return device
    if available is None:
        try:
            available = device_bytes(device)
        except ConfigError:
            return device
    if data_bytes <= DATA_SHARE * float(available):
        return device
    log.info("data stay in host memory: %.1f GB of data tensors > %g of the %.1f GB of %s",
             data_bytes / GB, DATA_SHARE, float(available) / GB, device)
    return torch.device("cpu")


def public_data_bytes(task, n_public: int) -> int:
    """The bytes of a task's data tensors with each training tensor sized for the declared public size
    `n_public` (its bytes per record × n_public), never the private count its first axis has."""
    total = 0
    for key, t in (getattr(task, "t", None) or {}).items():
        rows = n_public if key.endswith("_train") else t.shape[0]
        total += t.element_size() * (t.numel() // max(1, t.shape[0])) * int(rows)
    return total


def sequence_length(task) -> int:
    """The tokens per example of a task: its `max_len` (question answering), else the second dimension of its
    training tensor (`ids_train` of a causal LM, `h_train` of the classifier's cached states), else 1."""
    if getattr(task, "max_len", None):
        return int(task.max_len)
    tensors = getattr(task, "t", None) or {}
    for key in ("ids_train", "h_train"):
        if key in tensors and tensors[key].dim() >= 2:
            return int(tensors[key].shape[1])
    return 1


def resolve_physical_batch(task, settings, device: torch.device | str, n_public: int,
                           available: float | None = None) -> tuple[int, MemoryEstimate]:
    """`settings.physical_batch: auto` of a trainer's task on `device`: (the physical batch, the estimate),
    from public quantities only: the device's memory (`device_bytes`; `available` given: the memory the
    whole run may use, e.g. in a test), the model, and the data sized for `n_public` records
    (`public_data_bytes`). Capped at the expected batch q·n_public rounded up (a larger chunk is never
    filled on average)."""
    device = torch.device(device)
    model = getattr(task, "prototype", None)
    trial_copy = None  # a trial copies the prototype's trainable parameters and buffers (OnDevice.build_model)
    if model is None:  # a task without a prototype (a test double): a whole trial's model stands for it
        model = task.build_model()
        trial_copy = model_bytes(model)
    # the data count where they live with the model; kept in host memory, a step copies one batch over
    data = public_data_bytes(task, n_public) if getattr(task, "data_device", device) == device else 0
    est = estimate(model, sequence_length(task), settings, device=device, data_bytes=data, trial_copy=trial_copy)
    if available is None:
        available = device_bytes(device)
    expected = settings.sample_rate(n_public) * n_public
    batch = est.largest_batch(available, max(1, math.ceil(expected - 1e-9)))
    log.info("physical_batch auto on %s: %d (%.1f GB fixed + %.2f GB per example, %.1f GB on the device, safety %g)",
             device, batch, est.fixed / GB, est.per_example / GB, float(available) / GB, SAFETY)
    return batch, replace(est, available=int(available))
