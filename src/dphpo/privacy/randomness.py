"""The one home of private randomness: a secret key, and draws derived from it by label.

A DP guarantee holds only if the adversary cannot compute the noise. Every private draw of the
workflow (trial noise, Poisson masks, a secret subsample, the number of Papernot–Steinke trials,
selection noise) therefore comes from a secret 256-bit key through HMAC-SHA256 over a label that
names the draw completely: dataset, extractor, variant, study seed, the job's settings hash (the
hash of the config it reads, `provenance.settings_hash`; a language job: its study and the hash of
`language_settings`), the data it reads (a keyed MAC of their checksums: `NoiseScope.over_data`),
method, stage, target and trial. So the same key and config reproduce every
result byte for byte (a killed job resumes to the same numbers, two directories given one key
agree), a new key gives independent noise, and two results published side by side (variants,
extractors, datasets, two versions of one study's config or of its data) never share noise, since their labels
differ: subtracting two releases does not cancel it.

No derived seed is ever written to an output; provenance records `fingerprint()`, a hash of the
key that identifies it without revealing it. The key lives outside `results/`, owner-only: given
by `privacy.noise_key_file`, else by the environment variable DPHPO_NOISE_KEY_FILE, else
`.dphpo/noise.key` in the working directory, created from OS entropy on first use. A key file is
refused (ConfigError) when

- a configured one (the setting or the variable) does not exist: only the default is created, so a
  lost key is never silently replaced by a new one;
- it lies inside the results tree (`dphpo.layout.ROOT`, paths resolved, so links and `..` count):
  it would be published with the tree;
- it is readable by group or others;
- its key has low entropy (`check_entropy`): fewer than MIN_DISTINCT = 16 distinct byte values among
  its 32 bytes, or fewer than 16 distinct differences between successive bytes (mod 256). The first
  catches a zero key, a repeated byte and typed patterns, the second counters and short periods. A
  uniform key fails either with probability below 5e-16 (exact occupancy count: 3.2e-17 and 4.6e-16),
  and `NoiseKey.generate` draws again in that case, so a generated key always passes.

Limits (docs/privacy.md): torch and numpy generators get 63 and 256 bits of the HMAC output (a torch
generator's whole state expanded from its 63-bit seed by `dphpo.train.noise.secret_generator`: torch's
own manual_seed would keep 32 of them); they are not cryptographic generators, and floating-point Gaussian sampling is not exact.
`public_seed` is for simulations that release nothing private (audits, fixed data splits).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dphpo import layout
from dphpo.errors import ConfigError

KEY_BYTES = 32
ENV_VAR = "DPHPO_NOISE_KEY_FILE"
DEFAULT_KEY_FILE = Path(".dphpo") / "noise.key"
#: The fewest distinct byte values, and distinct differences of successive bytes, a key may have
#: (module docstring: a uniform 32-byte key has about 30 of each; fewer than 16 has probability < 5e-16).
MIN_DISTINCT = 16


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
        """Draws of one study: labels such as dataset, extractor, variant, seed and the job's settings hash
        prefix every draw."""
        return NoiseScope(self, tuple(sorted((str(k), v) for k, v in labels.items())))

    @classmethod
    def generate(cls) -> NoiseKey:
        """A key from OS entropy; drawn again in the (< 5e-16) case it fails `check_entropy`."""
        while True:
            secret = secrets.token_bytes(KEY_BYTES)
            if _low_entropy(secret) is None:
                return cls(secret)


@dataclass(frozen=True)
class NoiseScope:
    """The private draws of one study (dataset × extractor × variant × seed × settings hash); see the
    module docstring."""

    key: NoiseKey
    labels: tuple

    def _digest(self, *labels: object) -> bytes:
        return self.key.digest((self.labels, labels))

    def seed(self, *labels: object) -> int:
        """A secret 63-bit seed for a torch generator (one per trial run): give it to
        `dphpo.train.noise.secret_generator`, never to `manual_seed`, which keeps 32 of its bits."""
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

    def over_data(self, checksums: Sequence[str]) -> NoiseScope:
        """This scope for the data the checksums name (labelled by their keyed MAC): a release of other
        data (an edited dataset, features of another precision) never shares a draw with it, whose
        difference would cancel the noise and leave the data's. Raises ValueError without a checksum."""
        if not checksums:
            raise ValueError("a private run's noise needs the checksums of its data (its trainer's provenance names none)")
        return self.extend(data=self.mac("\n".join(sorted(checksums))))

    @property
    def study_seed(self) -> int:
        return int(self.label("seed", 0))

    def describe(self) -> dict:
        """What provenance may say about the randomness: the key's fingerprint and the scope's labels."""
        return {"noise_key_fingerprint": self.key.fingerprint(), "scope": dict(self.labels)}


def public_seed(*labels: object) -> int:
    """A seed anyone can recompute: only for draws that are not part of a release's mechanism."""
    return int.from_bytes(hashlib.sha256(_label_bytes(labels)).digest()[:8], "little") >> 1


def _low_entropy(secret: bytes) -> str | None:
    """Why `secret` looks like no random key (module docstring), or None."""
    distinct = len(set(secret))
    if distinct < MIN_DISTINCT:
        return f"only {distinct} distinct byte value(s) among its {len(secret)} bytes"
    steps = len({(b - a) % 256 for a, b in zip(secret, secret[1:])})
    if steps < MIN_DISTINCT:
        return f"only {steps} distinct difference(s) between successive bytes (a counter or a short repeated pattern)"
    return None


def check_entropy(secret: bytes, where: str) -> None:
    """Refuse a low-entropy key: fewer than MIN_DISTINCT distinct byte values, or fewer than
    MIN_DISTINCT distinct differences between successive bytes (module docstring). A uniform random
    key fails with probability below 5e-16; `NoiseKey.generate` never returns one that fails."""
    reason = _low_entropy(secret)
    if reason is not None:
        raise ConfigError(
            f"{where}: a low-entropy noise key ({reason}); anyone could guess it and recompute every draw. "
            "Use a key from OS entropy: delete the file to have the default one created, or run "
            "`python -c \"from dphpo.privacy.randomness import create_key_file; create_key_file('PATH')\"`"
        )


def _locate(configured: str | os.PathLike | None = None) -> tuple[Path, str | None]:
    """The key file and the setting that names it (None: the default)."""
    if configured:
        return Path(configured).expanduser(), "privacy.noise_key_file"
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR]).expanduser(), f"${ENV_VAR}"
    return DEFAULT_KEY_FILE, None


def key_path(configured: str | os.PathLike | None = None) -> Path:
    """Where the key lives: privacy.noise_key_file, else $DPHPO_NOISE_KEY_FILE, else .dphpo/noise.key."""
    return _locate(configured)[0]


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def check_outside_results(path: str | os.PathLike, where: str) -> None:
    """Refuse a key file inside the results tree (dphpo.layout.ROOT of the working directory): it would
    be published with it. Both the path as written and the file it resolves to (links, `..`) are
    compared with the tree as written and as resolved (results/ may itself be a link)."""
    written, resolved = Path(os.path.abspath(path)), Path(path).resolve()
    roots = {Path(os.path.abspath(layout.ROOT)), Path(layout.ROOT).resolve()}
    if any(_inside(p, root) for p in (written, resolved) for root in roots):
        raise ConfigError(
            f"{where}: the noise key file {path} lies inside the results tree ({Path(layout.ROOT).resolve()}), "
            "which is published; keep the key outside it (the default is .dphpo/noise.key)"
        )


def load_key(path: str | os.PathLike | None = None, *, create: bool = True) -> NoiseKey:
    """Read the key file (hex). `path` is the configured key file (privacy.noise_key_file); None:
    $DPHPO_NOISE_KEY_FILE, else the default .dphpo/noise.key.

    Only the default is created when missing (with `create`), from OS entropy; a configured key file
    that does not exist is an error naming the setting and the path, since creating it would replace
    a lost key, and every result's noise with it, without a word. Creation is atomic and exclusive
    (temporary file, then a hard link that fails if another job got there first), so parallel jobs
    that start on a fresh machine all end up with the same key. Refused (ConfigError): a key file
    inside the results tree, readable by group or others, malformed, or of low entropy.
    """
    path, source = _locate(path)
    where = source or "noise key file"
    check_outside_results(path, where)
    if path.is_symlink() and not path.exists():
        raise ConfigError(f"{where}: {path} is a link to {os.readlink(path)}, which does not exist; restore the key it "
                          "pointed to, or remove the link")
    if path.is_dir():
        raise ConfigError(f"{where}: {path} is a folder; expected the key file (64 hex digits)")
    if not path.exists():
        if source is not None:
            raise ConfigError(
                f"{source}: the noise key file {path} does not exist. Only the default {DEFAULT_KEY_FILE} is created "
                f"on first use; a configured key is never replaced by a new one (results made with the lost key "
                f"could not be reproduced). Restore the key, or unset {source} to use the default"
            )
        if not create:
            raise ConfigError(f"noise key file {path} does not exist (privacy.noise_key_file or ${ENV_VAR})")
        _create_key_file(path)
    mode = path.stat().st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(
            f"noise key file {path} is readable by others (mode {stat.S_IMODE(mode):o}); "
            f"its key keeps every result's noise secret: chmod 600 {path}"
        )
    try:
        text = path.read_text().strip()
        secret = bytes.fromhex(text)
    except (UnicodeDecodeError, ValueError):
        raise ConfigError(f"noise key file {path}: expected {2 * KEY_BYTES} hex digits") from None
    if len(secret) != KEY_BYTES:
        raise ConfigError(f"noise key file {path}: expected {2 * KEY_BYTES} hex digits, got {len(text)}")
    check_entropy(secret, f"{where} = {path}" if source else f"noise key file {path}")
    return NoiseKey(secret)


def create_key_file(path: str | os.PathLike) -> NoiseKey:
    """A new key from OS entropy in `path` (owner-only, exclusive: an existing file is kept and read);
    for a key file a config names (`privacy.noise_key_file`), which `load_key` never creates."""
    path = Path(path).expanduser()
    check_outside_results(path, "privacy.noise_key_file")
    if not path.exists():
        _create_key_file(path)
    return load_key(path)


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
        except OSError as err:  # a file system without hard links
            raise ConfigError(f"cannot create the noise key file {path} ({err.strerror or err}): its folder's file system "
                              "has no hard links (used to create it once among parallel jobs); create the key on a local "
                              "file system and name it in privacy.noise_key_file or $" + ENV_VAR) from None
    finally:
        tmp.unlink(missing_ok=True)


def check_key_config(config: dict) -> None:
    """Refuse, without creating anything, the key `key_from_config` would refuse: a configured key file
    that does not exist, or any existing one that is exposed, malformed or of low entropy (the default,
    when missing, is created by the first job)."""
    configured = (config.get("privacy") or {}).get("noise_key_file")
    path, source = _locate(configured)
    if source is not None or path.exists():
        load_key(configured, create=False)


def key_from_config(config: dict) -> NoiseKey:
    """The key a workflow config names (privacy.noise_key_file, else $DPHPO_NOISE_KEY_FILE: either must
    exist), else the default .dphpo/noise.key, created on first use."""
    return load_key((config.get("privacy") or {}).get("noise_key_file"))
