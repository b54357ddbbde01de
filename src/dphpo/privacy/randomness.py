"""The one home of private randomness: a secret key, and draws derived from it by label.

A DP guarantee holds only if the adversary cannot compute the noise. Every private draw of the
workflow (trial noise, Poisson masks, a secret subsample, the number of Papernot–Steinke trials,
selection noise) therefore comes from a secret 256-bit key through HMAC-SHA256 over a label that
names the draw completely: dataset, extractor, variant, study seed, method, stage, target and trial.
So the same key reproduces every result byte for byte (a killed job resumes to the same numbers,
two directories given one key agree), a new key gives independent noise, and two results published
side by side (variants, extractors, datasets) never share noise, since their labels differ.

No derived seed is ever written to an output; provenance records `fingerprint()`, a hash of the
key that identifies it without revealing it. The key lives outside `results/`, owner-only: given
by `privacy.noise_key_file`, else by the environment variable DPHPO_NOISE_KEY_FILE, else
`.dphpo/noise.key` in the working directory, created from OS entropy on first use.

Limits (docs/privacy.md): torch and numpy generators are seeded with 64 and 256 bits of the HMAC
output; they are not cryptographic generators, and floating-point Gaussian sampling is not exact.
`public_seed` is for simulations that release nothing private (audits, fixed data splits).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import stat
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dphpo.errors import ConfigError

KEY_BYTES = 32
ENV_VAR = "DPHPO_NOISE_KEY_FILE"
DEFAULT_KEY_FILE = Path(".dphpo") / "noise.key"


def _label_bytes(labels: tuple) -> bytes:
    """A canonical encoding of a label: JSON, with top-level floats as their repr strings (1.0 and 1
    differ, but a float encodes like the string of its repr); nested values are plain JSON. Callers
    label targets as f"{eps:.10g}" strings, so equal budgets give equal labels."""
    return json.dumps([repr(x) if isinstance(x, float) else x for x in labels], separators=(",", ":")).encode()


@dataclass(frozen=True)
class NoiseKey:
    """A secret key; never printed, never written to an output (only its fingerprint)."""

    secret: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if len(self.secret) != KEY_BYTES:
            raise ConfigError(f"noise key: expected {KEY_BYTES} bytes, got {len(self.secret)}")

    def fingerprint(self) -> str:
        """16 hex digits of a hash of the key: names the key in provenance, reveals nothing of it."""
        return hashlib.sha256(b"dphpo noise-key fingerprint\0" + self.secret).hexdigest()[:16]

    def digest(self, labels: tuple) -> bytes:
        return hmac.new(self.secret, _label_bytes(labels), hashlib.sha256).digest()

    def scope(self, **labels: object) -> NoiseScope:
        """Draws of one study: labels such as dataset, extractor, variant and seed prefix every draw."""
        return NoiseScope(self, tuple(sorted((str(k), v) for k, v in labels.items())))

    @classmethod
    def generate(cls) -> NoiseKey:
        return cls(secrets.token_bytes(KEY_BYTES))


@dataclass(frozen=True)
class NoiseScope:
    """The private draws of one study (dataset × extractor × variant × seed); see the module docstring."""

    key: NoiseKey
    labels: tuple

    def _digest(self, *labels: object) -> bytes:
        return self.key.digest((self.labels, labels))

    def seed(self, *labels: object) -> int:
        """A secret 63-bit seed for a torch generator (one per trial run)."""
        return int.from_bytes(self._digest(*labels)[:8], "little") >> 1

    def rng(self, *labels: object) -> np.random.Generator:
        """A numpy generator seeded with all 256 bits of the label's HMAC."""
        return np.random.default_rng(int.from_bytes(self._digest(*labels), "little"))

    def mac(self, text: str) -> str:
        """A keyed checksum of `text` (e.g. a private dataset's sha256): the key's holder can check that a
        release came from given data; nobody else can test a candidate dataset against it."""
        return self.key.digest(("mac", text)).hex()

    def label(self, name: str, default: object = None) -> object:
        return dict(self.labels).get(name, default)

    def extend(self, **labels: object) -> NoiseScope:
        """A scope of its own inside this one: a method run beside another on the same study (the
        safeguarded rule beside the paper's) never shares a draw with it."""
        clash = sorted(set(labels) & {k for k, _ in self.labels})
        if clash:
            raise ValueError(f"noise scope already has the label(s) {', '.join(clash)}")
        return self.key.scope(**dict(self.labels), **labels)

    @property
    def study_seed(self) -> int:
        return int(self.label("seed", 0))

    def describe(self) -> dict:
        """What provenance may say about the randomness: the key's fingerprint and the scope's labels."""
        return {"noise_key_fingerprint": self.key.fingerprint(), "scope": dict(self.labels)}


def public_seed(*labels: object) -> int:
    """A seed anyone can recompute: only for draws that are not part of a release's mechanism."""
    return int.from_bytes(hashlib.sha256(_label_bytes(labels)).digest()[:8], "little") >> 1


def key_path(configured: str | os.PathLike | None = None) -> Path:
    """Where the key lives: privacy.noise_key_file, else $DPHPO_NOISE_KEY_FILE, else .dphpo/noise.key."""
    if configured:
        return Path(configured).expanduser()
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR]).expanduser()
    return DEFAULT_KEY_FILE


def load_key(path: str | os.PathLike | None = None, *, create: bool = True) -> NoiseKey:
    """Read the key file (hex), creating it from OS entropy when missing and `create` is set.

    Creation is atomic and exclusive (temporary file, then a hard link that fails if another job got
    there first), so parallel jobs that start on a fresh machine all end up with the same key.
    """
    path = key_path(path)
    if not path.exists():
        if not create:
            raise ConfigError(f"noise key file {path} does not exist (privacy.noise_key_file or ${ENV_VAR})")
        _create_key_file(path)
    mode = path.stat().st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(
            f"noise key file {path} is readable by others (mode {stat.S_IMODE(mode):o}); "
            f"its key keeps every result's noise secret: chmod 600 {path}"
        )
    text = path.read_text().strip()
    try:
        secret = bytes.fromhex(text)
    except ValueError:
        raise ConfigError(f"noise key file {path}: expected {2 * KEY_BYTES} hex digits") from None
    if len(secret) != KEY_BYTES:
        raise ConfigError(f"noise key file {path}: expected {2 * KEY_BYTES} hex digits, got {len(text)}")
    return NoiseKey(secret)


def _create_key_file(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(NoiseKey.generate().secret.hex() + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, path)  # fails if a parallel job created the key first: then use theirs
        except FileExistsError:
            pass
    finally:
        tmp.unlink(missing_ok=True)


def key_from_config(config: dict) -> NoiseKey:
    """The key a workflow config names (privacy.noise_key_file), created on first use."""
    return load_key((config.get("privacy") or {}).get("noise_key_file"))
