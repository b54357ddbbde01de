"""Every language task and trainer computes on `training.device` (dphpo.tasks.device), checked on the CPU
with torch's `meta` device: its tensors have shapes and no values, so any tensor left on the CPU meets a
`meta` one in some operation and fails. `OnMeta` reads a value of a `meta` tensor as 0 (the trace's
floats, DP-ZO's scalar) and records every copy from the CPU to the device and every random draw: a
training step moves the indices of its batch and the noise (or DP-ZO's direction) drawn on the CPU,
never data, and draws the same numbers as on the CPU."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from dphpo.device import choose_device
from dphpo.errors import ConfigError
from dphpo.features.continual import PrivateStageConfig, continue_privately
from dphpo.features.networks import build_network
from dphpo.privacy.accountant import make_accountant
from dphpo.tasks.causal_lm import CausalLMTask, small_gpt2
from dphpo.tasks.classification import SequenceClassificationTask
from dphpo.tasks.models import linearize_conv1d, set_trainable_gpt2
from dphpo.tasks.question_answering import Codec, QuestionAnsweringTask, load_split, prepare, prompt, target
from dphpo.train.dpzo import DPZOSettings, DPZOTrainer
from dphpo.train.finetune import FinetuneSettings, FinetuneTrainer, train_dp

from conftest import noise_scope
from test_question_answering import write_fixture

META = torch.device("meta")
RANDOM = {"rand", "randn", "randint", "randperm", "normal", "bernoulli", "uniform", "random"}


class OnMeta(TorchDispatchMode):
    """Run code on `meta` tensors: a value read back is 0; CPU-to-`meta` copies and random draws are recorded."""

    def __init__(self):
        super().__init__()
        self.copies: list[tuple[torch.dtype, tuple[int, ...]]] = []
        self.draws: list[tuple[str, torch.device, torch.Tensor]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten._local_scalar_dense.default and args[0].is_meta:
            return False if args[0].dtype == torch.bool else 0
        out = func(*args, **kwargs)
        source, target_ = None, None
        if func is torch.ops.aten._to_copy.default:
            source, target_ = args[0], out
        elif func is torch.ops.aten.copy_.default:
            source, target_ = args[1], args[0]
        if source is not None and source.device.type == "cpu" and target_.is_meta:
            self.copies.append((source.dtype, tuple(source.shape)))
        name = func.overloadpacket.__name__.rstrip("_")
        if name in RANDOM and isinstance(out, torch.Tensor):
            self.draws.append((name, out.device, out.clone()))
        return out


def placements(task) -> set[torch.device]:
    model = task.build_model()
    tensors = [*task.prototype.parameters(), *task.prototype.buffers(), *model.parameters(), *model.buffers(), *task.t.values()]
    return {t.device for t in tensors} | {task.rows(torch.tensor([0, 1])).device}


# --------------------------------------------------------------------------------------------
# the tasks, built on the CPU unless a device is named


def classification_task(device=None, lora=None):
    from transformers import BertConfig
    from transformers.models.bert.modeling_bert import BertLayer

    torch.manual_seed(0)
    layer = BertLayer(BertConfig(hidden_size=8, num_attention_heads=2, intermediate_size=16, hidden_dropout_prob=0.0,
                                 attention_probs_dropout_prob=0.0, attn_implementation="eager"))
    g = torch.Generator().manual_seed(0)
    t = {"h_train": torch.randn(12, 5, 8, generator=g), "mask_train": torch.ones(12, 5), "y_train": torch.randint(0, 3, (12,), generator=g),
         "h_test": torch.randn(6, 5, 8, generator=g), "mask_test": torch.ones(6, 5), "y_test": torch.randint(0, 3, (6,), generator=g)}
    t["mask_train"][::3, 3:] = 0
    return SequenceClassificationTask([layer], t, 3, {}, lora=lora, device=device)


def causal_lm_task(device=None):
    torch.manual_seed(0)
    model = linearize_conv1d(small_gpt2(vocab_size=50, n_layer=2, n_embd=16, n_head=2, n_positions=16, eos_id=0))
    set_trainable_gpt2(model, "all")
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, 50, (12, 10), generator=g)
    mask = torch.ones(12, 10)
    mask[::3, 7:] = 0
    return CausalLMTask(model, ids, mask, ids[:6], mask[:6], {"tiny": True}, device=device)


@pytest.fixture(scope="module")
def squad_folder(tmp_path_factory):
    return write_fixture(tmp_path_factory.mktemp("squad"))


def question_answering_task(folder, device=None):
    from dphpo.tasks.causal_lm import EOS, train_bpe_tokenizer

    train, test = load_split(folder, "train", None, 0, "test"), load_split(folder, "dev", None, 0, "test")
    codec = Codec.from_tokenizers(train_bpe_tokenizer([prompt(e) + target(e) for e in train] * 4, 320), EOS)
    torch.manual_seed(0)
    model = small_gpt2(codec.vocab_size, n_layer=2, n_embd=16, n_head=2, n_positions=160, eos_id=codec.eos_id)
    model, prov = prepare(model, {"lora": {"rank": 2, "alpha": 4}, "device": "cpu"}, "language.studies.squad_test")
    return QuestionAnsweringTask(model, codec, train, test, prov, max_len=160, max_new_tokens=6, eval_batch=2, device=device)


TASKS = {
    "classification": lambda folder, device=None: classification_task(device),
    "classification_lora": lambda folder, device=None: classification_task(device, lora={"rank": 2}),
    "causal_lm": lambda folder, device=None: causal_lm_task(device),
    "question_answering": question_answering_task,
}


# --------------------------------------------------------------------------------------------
# tasks and trainers


@pytest.mark.parametrize("kind", sorted(TASKS))
def test_a_task_built_for_a_device_keeps_its_model_data_and_batches_there(kind, squad_folder):
    task = TASKS[kind](squad_folder, device="meta")
    assert task.device == META
    assert placements(task) == {META}
    on_cpu = TASKS[kind](squad_folder)  # no device named: where its model (classification: its states) is
    assert on_cpu.device == torch.device("cpu") and placements(on_cpu) == {torch.device("cpu")}


@pytest.mark.parametrize("trainer_class, settings_class", [(FinetuneTrainer, FinetuneSettings), (DPZOTrainer, DPZOSettings)])
@pytest.mark.parametrize("kind", sorted(TASKS))
def test_a_trainer_puts_its_task_on_training_device_and_records_the_device_used(trainer_class, settings_class, kind, squad_folder):
    task = TASKS[kind](squad_folder)
    settings = settings_class(batch_size=4, device="meta")
    trainer = trainer_class(task, make_accountant("prv", 1e-5, sample_rate=0.5), settings, task.n_train)
    assert trainer.task is task and task.device == META and placements(task) == {META}
    prov = trainer.provenance()
    assert prov["compute_device"] == {"device": "meta"} and prov["settings"]["device"] == "meta"
    # auto: the device used is recorded, not "auto"
    auto = trainer_class(TASKS[kind](squad_folder), make_accountant("prv", 1e-5, sample_rate=0.5), settings_class(batch_size=4), task.n_train)
    assert auto.provenance()["compute_device"]["device"] == str(choose_device("auto")) and auto.provenance()["settings"]["device"] == "auto"


def test_auto_is_the_gpu_when_there_is_one(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert choose_device("auto") == choose_device(None) == torch.device("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert choose_device("auto") == torch.device("cpu")
    assert choose_device("cuda:1") == torch.device("cuda", 1)


def test_provenance_names_the_device_used_and_its_model(monkeypatch):
    from dphpo.device import cpu_model, describe_device

    assert describe_device("cpu") == {"device": "cpu", "model": cpu_model(), "cpu_capability": torch.backends.cpu.get_cpu_capability()}
    assert cpu_model()
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    assert describe_device("cuda:0") == {"device": "cuda:0", "model": "NVIDIA H100 80GB HBM3"}
    assert describe_device("meta") == {"device": "meta"}


def test_a_device_setting_torch_cannot_name_is_refused_with_its_key():
    for settings_class in (FinetuneSettings, DPZOSettings):
        with pytest.raises(ConfigError, match=r"language.studies\[\].training.device"):
            settings_class.from_config({"device": "gpu"})
        assert settings_class.from_config({"device": "cuda:1"}).device == "cuda:1"


# --------------------------------------------------------------------------------------------
# training on the device


RUNS = {  # (task, trainer, settings): ghost clipping where opacus has meta kernels (no embedding trains)
    "finetune_classification_ghost": ("classification", FinetuneTrainer, dict(clipping="ghost")),
    "finetune_classification_lora_hooks": ("classification_lora", FinetuneTrainer, dict(clipping="hooks", optimizer="adam")),
    "finetune_causal_lm_hooks": ("causal_lm", FinetuneTrainer, dict(clipping="hooks")),
    "finetune_question_answering_ghost": ("question_answering", FinetuneTrainer, dict(clipping="ghost")),
    "dpzo_classification": ("classification", DPZOTrainer, {}),
    "dpzo_causal_lm": ("causal_lm", DPZOTrainer, {}),
}


def train(run: str, device: str, folder, sigma: float = 1.0) -> tuple[OnMeta, torch.nn.Module, object]:
    kind, trainer_class, extra = RUNS[run]
    settings_class = FinetuneSettings if trainer_class is FinetuneTrainer else DPZOSettings
    task = TASKS[kind](folder)
    settings = settings_class(batch_size=5, physical_batch=3, device=device, **extra)
    trainer = trainer_class(task, make_accountant("prv", 1e-5, sample_rate=settings.sample_rate(task.n_train)), settings, task.n_train)
    with OnMeta() as mode:
        model, _ = trainer.train_one(0.05, 3, sigma, 7, False, run)
    return mode, model, task


@pytest.mark.parametrize("run", sorted(RUNS))
def test_training_runs_on_the_device_and_a_step_moves_only_indices_and_noise(run, squad_folder):
    mode, model, task = train(run, "meta", squad_folder)
    assert {p.device for p in model.parameters()} | {b.device for b in model.buffers()} == {META}
    noise_shapes = {tuple(p.shape) for p in model.parameters() if p.requires_grad}
    assert mode.copies, "the batches' indices and the noise come from the CPU"
    for dtype, shape in mode.copies:
        # a batch's indices (1-d int64) or a parameter's noise / DP-ZO direction: never rows of data
        assert (dtype == torch.int64 and len(shape) == 1) or (dtype == torch.float32 and shape in noise_shapes), (dtype, shape)
    if not run.endswith("question_answering_ghost"):  # evaluation on the device too (generation is not meta-traceable)
        with OnMeta() as mode:
            task.evaluate(model, "test")
        assert mode.copies == []


def test_data_larger_than_half_the_card_stay_in_host_memory_decided_from_public_sizes():
    from dphpo.train.memory import DATA_SHARE, data_device

    gb = 1e9
    assert DATA_SHARE == 0.5
    # MNLI's 154 GB of cached states never fit an 80 GB card; SST-2's 5 GB do
    assert data_device("cuda", 154 * gb, available=80 * gb) == torch.device("cpu")
    assert data_device("cuda:1", 5 * gb, available=80 * gb) == torch.device("cuda", 1)
    assert data_device("cuda", 40 * gb, available=80 * gb) == torch.device("cuda")  # exactly the share: on the card
    assert data_device("cuda", 40 * gb + 1, available=80 * gb) == torch.device("cpu")
    assert data_device("cpu", 10**15) == torch.device("cpu")  # on the CPU the data are where they compute
    assert data_device(META, 10**15) == META  # nothing to measure: with the model


@pytest.mark.parametrize("run", ["finetune_classification_ghost", "finetune_causal_lm_hooks", "dpzo_classification"])
def test_data_kept_in_host_memory_copy_one_batch_per_chunk_and_train_the_same(run, squad_folder, monkeypatch):
    """A card too small for the data (its memory patched to 1 kB): the model trains on the device, the data
    stay on the CPU, each chunk copies its own rows alone (never the whole tensor), evaluation copies one
    evaluation batch at a time, and provenance says where the data were."""
    import dphpo.train.memory as memory

    monkeypatch.setattr(memory, "device_bytes", lambda device: 1000)
    mode, model, task = train(run, "meta", squad_folder)
    assert {p.device for p in model.parameters()} == {META} and task.device == META
    assert {t.device for t in task.t.values()} == {torch.device("cpu")} and task.rows(torch.tensor([0])).device.type == "cpu"
    noise_shapes = {tuple(p.shape) for p in model.parameters() if p.requires_grad}
    rows = {(t.dtype, tuple(t.shape[1:])) for key, t in task.t.items() if key.endswith("_train")}
    data_copies = [(dtype, shape) for dtype, shape in mode.copies if not (dtype == torch.float32 and shape in noise_shapes)]
    assert data_copies, "the batches' rows come from host memory"
    for dtype, shape in data_copies:  # rows of a training tensor, at most one physical batch (3) at a time
        assert (dtype, shape[1:]) in rows and shape[0] <= 3, (dtype, shape)
    kind, trainer_class, extra = RUNS[run]
    settings_class = FinetuneSettings if trainer_class is FinetuneTrainer else DPZOSettings
    trainer = trainer_class(TASKS[kind](squad_folder), make_accountant("prv", 1e-5, sample_rate=0.5), settings_class(batch_size=4, device="meta"), 12)
    assert trainer.provenance()["data_device"] == "cpu"
    with OnMeta() as mode:
        task.evaluate(model, "test")
    assert mode.copies and all(shape[0] <= task.eval_batch for _, shape in mode.copies)


@pytest.mark.parametrize("run", ["finetune_classification_ghost", "finetune_causal_lm_hooks", "dpzo_causal_lm"])
def test_batches_noise_and_directions_are_the_same_draws_on_any_device(run, squad_folder, monkeypatch):
    """Drawn on the CPU from the trial's generators (the secret key's seed in a study), then moved: a run
    on another device draws the very same numbers, in the same order. (Drawn in line here: the recording
    mode sees this thread only; tests/test_noise_ahead.py shows drawing ahead gives the same numbers.)"""
    import dphpo.train.dpzo as dpzo
    import dphpo.train.finetune as finetune
    from dphpo.train.noise import DrawAhead

    for trainer in (finetune, dpzo):
        monkeypatch.setattr(trainer, "DrawAhead", lambda draw, steps, ahead=True: DrawAhead(draw, steps, ahead=False))
    on_cpu, _, _ = train(run, "cpu", squad_folder)
    on_meta, _, _ = train(run, "meta", squad_folder)
    assert len(on_cpu.draws) == len(on_meta.draws) > 3
    for (name_c, device_c, value_c), (name_m, device_m, value_m) in zip(on_cpu.draws, on_meta.draws):
        assert name_c == name_m and device_c == device_m == torch.device("cpu")
        assert torch.equal(value_c, value_m)


def test_the_cpu_run_is_unchanged_by_the_device_setting(squad_folder):
    """`device: cpu` and a task built without a device train the same model, bit for bit."""
    _, named, _ = train("finetune_classification_ghost", "cpu", squad_folder)
    task = classification_task()
    settings = FinetuneSettings(batch_size=5, physical_batch=3, clipping="ghost")
    direct, _ = train_dp(copy.deepcopy(task.prototype), task.example_losses, task.n_train, n_public=task.n_train, lr=0.05, steps=3,
                         sigma=1.0, seed=7, settings=settings)
    for a, b in zip(named.parameters(), direct.parameters()):
        assert torch.equal(a, b)


# --------------------------------------------------------------------------------------------
# DP continual pre-training


def test_dp_continual_pretraining_trains_on_the_device_with_images_and_labels_moved_once(monkeypatch):
    import dphpo.features.continual as continual

    monkeypatch.setattr(continual, "evaluate", lambda *a, **k: (0.0, 0.0))  # the test split's pass: not a training step
    torch.manual_seed(0)
    model = build_network("small_cnn", 10, width=4, norm="group")
    stage = PrivateStageConfig.from_config({"dataset": "digits", "eps": 2.0, "epochs": 1, "batch_size": 64, "lr": 0.5}, "private_stage")
    spec = {"resolution": 16, "mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25]}
    with OnMeta() as mode:
        trained, record = continue_privately(model, stage, spec, noise_scope(0, pretraining="cont"), device="meta", progress=False)
    assert {p.device for p in trained.parameters()} == {META}
    steps, n_params = record["plan"]["steps"], sum(p.numel() for p in trained.parameters())
    images = [shape for dtype, shape in mode.copies if dtype == torch.uint8]
    assert len(images) == 1 and images[0][1:] == (8, 8)  # all training images (8x8 digits), once
    n = images[0][0]
    assert [shape for dtype, shape in mode.copies if dtype == torch.int64 and shape == (n,)] == [(n,)]  # the labels, once
    assert all(len(shape) == 1 for dtype, shape in mode.copies if dtype == torch.int64)
    assert sum(1 for dtype, shape in mode.copies if dtype == torch.float32 and shape == (n_params,)) == steps  # the noise
    assert record["device"] == "meta" and np.isfinite(record["plan"]["sigma"])


def test_the_top_level_training_device_reaches_a_language_study_unless_it_sets_its_own():
    from dphpo.studies import checks
    from dphpo.studies.trainers import trainer_settings

    study = {"name": "s", "task": "classification", "trainer": "finetune", "training": {"batch_size": 8}}
    config = {"training": {"device": "cpu"}}
    assert trainer_settings(config, study).device == "cpu"
    assert trainer_settings(config, study | {"training": {"device": "meta"}}).device == "meta"
    assert trainer_settings({}, study).device == "auto"
    with pytest.raises(ConfigError, match=r"language\.studies\.s\.training\.device: 'cuda' but no CUDA device"):
        checks.check_device({"device": "cuda"}, False, "language.studies.s.training.device")


def test_question_answering_prepares_its_model_on_the_training_device_unless_the_study_names_one():
    """Audit: `prepare` moved the model to `model.device` (default auto: cuda:0 whenever a GPU is visible)
    before the trainer moved it to training.device: a 13 B model held a card it was not trained on."""
    torch.manual_seed(0)
    model = small_gpt2(64, n_layer=1, n_embd=16, n_head=2, n_positions=32, eos_id=0)
    model, _ = prepare(model, {"lora": {"rank": 2, "alpha": 4}}, "language.studies.squad_test", "meta")
    assert {p.device.type for p in model.parameters()} == {"meta"}
    model = small_gpt2(64, n_layer=1, n_embd=16, n_head=2, n_positions=32, eos_id=0)
    model, _ = prepare(model, {"lora": {"rank": 2, "alpha": 4}, "device": "cpu"}, "language.studies.squad_test", "meta")  # model.device overrides it
    assert {p.device.type for p in model.parameters()} == {"cpu"}


def test_the_hidden_state_cache_runs_its_encoder_on_the_device_asked_for(monkeypatch):
    """Audit: rule language_cache asks for a GPU, but the encoder always ran on the CPU (inputs never moved)."""
    from dphpo.tasks.classification import encode_hidden_states
    from dphpo.tasks.models import load_encoder

    model, tokenizer, _ = load_encoder({"name": "minilm"})
    moved, seen = [], []
    monkeypatch.setattr(type(model), "to", lambda self, device: moved.append(torch.device(device)) or self)
    model.register_forward_pre_hook(lambda mod, args, kwargs: seen.append(kwargs["input_ids"].device), with_kwargs=True)
    h, _ = encode_hidden_states(model, tokenizer, ["a b", "c"], 8, 3, progress=False, device="cpu")
    assert moved == [torch.device("cpu")] and seen == [torch.device("cpu")] and h.dtype == np.float32
    assert not torch.is_inference_mode_enabled()
