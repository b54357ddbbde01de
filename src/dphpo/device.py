"""Where the workflow computes: `training.device` (`auto`: the GPU when there is one), and what provenance says of it."""

from __future__ import annotations

import platform

import torch

from dphpo.errors import ConfigError


def choose_device(name: str | torch.device | None = "auto") -> torch.device:
    """`auto` (or None): CUDA when this process sees a GPU, else the CPU; otherwise the device named."""
    if isinstance(name, torch.device):
        return name
    if name in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def check_device_setting(name: str, where: str) -> str:
    """`name` if it is `auto` or a device torch can name (`cpu`, `cuda`, `cuda:N`, …); a ConfigError at `where` otherwise."""
    try:
        if not isinstance(name, str):
            raise TypeError(name)
        if name != "auto":
            torch.device(name)
    except (RuntimeError, TypeError):
        raise ConfigError(f"{where}: expected auto, cpu, cuda or cuda:N, got {name!r}") from None
    return name


def cpu_model() -> str:
    """The processor's model name (Linux: /proc/cpuinfo), else what the platform says."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def describe_device(device: str | torch.device | None) -> dict[str, str]:
    """What a result was computed on, for provenance: the device used (`auto` resolved) and its model."""
    device = choose_device(device)
    if device.type == "cuda":
        return {"device": str(device), "model": torch.cuda.get_device_name(device)}
    if device.type != "cpu":
        return {"device": str(device)}
    # torch picks its vectorised kernels (normal_ among them) by this: same key, same numbers needs the same one
    return {"device": str(device), "model": cpu_model(), "cpu_capability": torch.backends.cpu.get_cpu_capability()}
