"""Philox4x32-10: private draws made on the training device, the same numbers on the CPU and a GPU.

`training.noise_generator: philox` (the trainers on cached features: DP-GD and OSO-DPSGD). The default,
`mt`, draws every noise vector on a CPU Mersenne Twister (`dphpo.train.noise`), which a GPU trainer waits
for (4.5 ms per step of 64 CIFAR-10 heads on one H100, its GEMMs ~1 ms). Philox (Salmon et al., SC 2011,
the generator of cuRAND and JAX) is a function of a key and a counter: each 128-bit counter gives four
32-bit words, so a step's draws are one element-wise program over (trial, block) that runs where the model
is, and its integers are bit-identical on any device (measured on one H200: 100 % of 491,520 float32
normals equal to the CPU's; benchmarks/noise_generators.py, docs/privacy.md "The generator").

Each trial's 128 secret bits come from its secret seed (`dphpo.privacy.randomness`) by SHA-256: the key
(k0, k1) and the counter's high words (c2, c3), so no public quantity addresses its draws and a search over
keys is a search over 2^128. The counter's low words address a draw: c0 the block (four words), c1 the
step and what is drawn (`NOISE`, `MASK`, `INIT`, `NOISE_Q`), so a trial's draw at step t does not depend
on the order of calls, on which other trials share the batch, or on the device. Normals are Box–Muller
pairs of two words in float64 (uniforms in (0, 1], so log never sees 0), rounded to float32; a Poisson mask
keeps a record where its uniform is below q, which happens with probability at most q (a 32-bit uniform
rounds q down by under 2^-32: the accounted rate is never exceeded).

Like the Mersenne Twister, Philox is not a cryptographic generator, and floating-point Gaussians are not
exact (docs/privacy.md).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import torch

from dphpo.errors import ConfigError
from dphpo.train.noise import seed_label

M0, M1 = 0xD2511F53, 0xCD9E8D57  # Philox4x32 multipliers
W0, W1 = 0x9E3779B9, 0xBB67AE85  # Weyl key increments
WORD = 0xFFFFFFFF
#: What a draw is for (the low bits of counter word c1; the step is above them).
NOISE, MASK, INIT, NOISE_Q = range(4)
_TAG_BITS = 3
#: `training.noise_generator`: each trial's CPU Mersenne Twister (`dphpo.train.noise`), or Philox on the device.
GENERATORS = ("mt", "philox")
#: Random123's philox4x32_10 known answers: (counter words = key words = w) → four words.
KNOWN_ANSWERS = {0: (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8), WORD: (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)}


def _mulhilo(a: torch.Tensor, m: int) -> tuple[torch.Tensor, torch.Tensor]:
    # a < 2^32 and m < 2^32 in int64: the product wraps mod 2^64 (two's complement, as uint64 would), so its
    # low and high 32-bit words are exact
    p = a * m
    return (p >> 32) & WORD, p & WORD


def philox4x32(counter: Sequence[torch.Tensor], key: Sequence[torch.Tensor | int], rounds: int = 10) -> list[torch.Tensor]:
    """Philox4x32-`rounds` of four int64 tensors of 32-bit counter words under a key of two 32-bit words
    (ints or tensors, broadcast with the counter): four words out."""
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for _ in range(rounds):
        hi0, lo0 = _mulhilo(c0, M0)
        hi1, lo1 = _mulhilo(c2, M1)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
        k0, k1 = (k0 + W0) & WORD, (k1 + W1) & WORD
    return [c0, c1, c2, c3]


def check_known_answers() -> None:
    """Raise unless this implementation gives Random123's known answers (checked before a run draws)."""
    for word, expect in KNOWN_ANSWERS.items():
        got = tuple(int(x) for x in philox4x32([torch.tensor([word])] * 4, (word, word)))
        if got != expect:
            raise RuntimeError(f"Philox4x32-10 known answer wrong for words {word:#x}: {[hex(x) for x in got]}")


def check_generator(name: str) -> None:
    if name not in GENERATORS:
        raise ValueError(f"noise_generator: expected one of {', '.join(GENERATORS)}, got {name!r}")


def require_mt(name: str, where: str) -> None:
    """Refuse, naming `where`, a generator other than mt for a trainer that draws from CPU Mersenne Twisters
    only (it would record a generator it did not use)."""
    if name != "mt":
        raise ConfigError(f"{where}: training.noise_generator: {name} is implemented by the trainers on cached features "
                          "(DP-GD, OSO-DPSGD's head, Mehta et al.); this one draws from CPU Mersenne Twisters: run it with mt")


def secret_words(seed: int) -> tuple[int, int, int, int]:
    """A trial's 128 secret bits (k0, k1, c2, c3), a hash of its secret seed."""
    digest = hashlib.sha256(seed_label(seed, ("philox4x32",))).digest()
    return tuple(int.from_bytes(digest[4 * i : 4 * i + 4], "little") for i in range(4))  # type: ignore[return-value]


class PhiloxTrials:
    """The private draws of a batch of trials (one secret seed each) on `device`, addressed by step."""

    def __init__(self, seeds: Sequence[int], device: torch.device):
        self.words = torch.tensor([secret_words(s) for s in seeds], dtype=torch.int64, device=device).view(-1, 4, 1)
        self.device = torch.device(device)

    def _words(self, active: int, n_words: int, step: int, tag: int) -> list[torch.Tensor]:
        """Four (active, ⌈n_words/4⌉) tensors of 32-bit words: the blocks of trials 0..active−1 at (step, tag)."""
        if not 0 <= step < 1 << (32 - _TAG_BITS):  # c1 holds the step and the purpose: past it, draws would repeat
            raise ValueError(f"Philox draws address steps 0..{(1 << (32 - _TAG_BITS)) - 1}, got step {step}")
        w = self.words[:active]
        block = torch.arange(-(-n_words // 4), dtype=torch.int64, device=self.device).view(1, -1)
        c1 = torch.full_like(block, (int(step) << _TAG_BITS) | tag)
        return philox4x32([block, c1, w[:, 2], w[:, 3]], (w[:, 0], w[:, 1]))

    def uniform(self, active: int, n: int, step: int, tag: int) -> torch.Tensor:
        """(active, n) float64 uniforms in (0, 1] (32 bits each)."""
        words = torch.stack(self._words(active, n, step, tag), dim=2).view(active, -1)[:, :n]
        return (words.double() + 1.0) * 2.0**-32

    def normal(self, active: int, n: int, step: int, tag: int) -> torch.Tensor:
        """(active, n) float32 standard normals: Box–Muller in float64 on word pairs (0, 1) and (2, 3)."""
        u = [(x.double() + 1.0) * 2.0**-32 for x in self._words(active, n, step, tag)]
        pairs = []
        for a, b in ((u[0], u[1]), (u[2], u[3])):
            r, theta = torch.sqrt(-2.0 * torch.log(a)), (2.0 * torch.pi) * b
            pairs += [r * torch.cos(theta), r * torch.sin(theta)]
        return torch.stack(pairs, dim=2).view(active, -1)[:, :n].float()
