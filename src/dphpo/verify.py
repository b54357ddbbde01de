"""`dphpo verify RESULTS_DIR`: audit a published results tree from its files alone.

For someone checking a DP claim that was published with its results tree (a reproducibility audit):
it never trains and never needs the noise key, so it runs on a tree copied to another machine. For
every release (`runs/**/result.json`, `language/**/results.json`) it checks

- the seal (`record_sha256`): a missing seal fails like a wrong one. The seal is an unkeyed sha256 of
  the record's canonical JSON: it detects accidental edits (a hand-edited number, a truncated copy),
  not forgery — whoever changes a record on purpose can recompute it (docs/privacy.md §3);
- the total ε, recomputed from the ledger's entries by an implementation independent of
  `dphpo.privacy`: the closed form of μ-GDP (scipy) for all-GDP ledgers; Google's `dp_accounting`
  for the rest — RDP curves summed and converted by `dp_accounting.rdp.compute_epsilon`, Poisson-
  subsampled Gaussian runs (PRV entries) composed with its privacy-loss-distribution accountant. The
  stated total must not be below what the ledger provably costs (`claim_problems`: the recomputed ε, or
  for PLD prv-accountant's lower bound on the true ε), nor far above it, and must be within the target;
- that the release holds no field its guarantee does not cover (exact training statistics, private
  counts, plain checksums of private data, the secret number of Papernot–Steinke/Koskela trials and
  the selected trial's index: `dphpo.hpo.common.INTERNAL_KEYS`);
- that the model beside a release is the one it trained: its sha256 is the record's `model_sha256` (a
  record written before dphpo sealed it has none);
- with `--configfile`, that each vision release's config hash is the one that config asks for.

It prints one table (file, method, claimed ε, recomputed ε, status) and a summary; the exit status is
0 when everything holds, 1 otherwise (2: bad arguments, in the CLI).
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scipy.optimize import brentq
from scipy.stats import norm

from dphpo import layout
from dphpo.hpo.common import INTERNAL_KEYS, TRIAL_COUNT_KEYS
from dphpo.hpo.selection import accounted
from dphpo.io import SEAL_KEY, file_sha256, seal
from dphpo.privacy.events import Event, Gaussian, PoissonSampledGaussian, RdpCurve
from dphpo.privacy.ledger import LedgerEntry
from dphpo.provenance import config_hash
from dphpo.studies import config as study_config
from dphpo.studies.validate import load_config

#: Tolerance of a recomputed ε where either side is numerical (prv-accountant's upper bound carries its
#: eps_error, 0.01 by default; PLD discretises): relative and absolute.
NUMERIC_RTOL, NUMERIC_ATOL = 0.02, 0.02
#: Relative tolerance where both sides are closed forms or the same RDP arithmetic.
EXACT_RTOL = 1e-6


@dataclass
class Check:
    """The verdict on one release."""

    file: str
    method: str
    claimed_eps: float | None
    recomputed_eps: float | None = None
    how: str = ""
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def row(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "method": self.method,
            "claimed ε": self.claimed_eps,
            "recomputed ε": self.recomputed_eps,
            "how": self.how,
            "status": "ok" if self.ok else "FAIL: " + "; ".join(self.problems),
        }


# ------------------------------------------------------------------------------------------
# independent accounting


def gdp_eps(mu: float, delta: float) -> float:
    """ε of μ-GDP at δ (Dong, Roth & Su 2022, Cor. 2.13), solved here with scipy alone."""
    if mu <= 0:
        return 0.0

    def excess(eps: float) -> float:
        return norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2) - delta

    if excess(0.0) <= 0:
        return 0.0
    hi = 1.0
    while excess(hi) > 0:
        hi *= 2
    return brentq(excess, 0.0, hi, xtol=1e-14, rtol=1e-12)


def _rdp_at(orders: list[float], values: list[float], order: float) -> float:
    """A curve's RDP at `order`: its value at the smallest grid order ≥ `order` (RDP grows with λ)."""
    candidates = [v for o, v in zip(orders, values) if o >= order]
    return min(candidates) if candidates else math.inf


def _ledger_events(record: dict) -> tuple[list[tuple[Event, int]], float]:
    """The (event, count) pairs of a release's ledger and the δ its ε is stated at (a truncated random
    number of trials spends its δ_cap first). KeyError / ValueError on an unreadable entry."""
    privacy = record.get("privacy") or {}
    delta = float(record["total_delta"]) - float((privacy.get("truncation") or {}).get("delta_cap", 0.0))
    return [LedgerEntry.from_dict(e).counted for e in privacy.get("entries") or []], delta


def recompute(record: dict) -> tuple[float | None, str]:
    """(ε, how) of a release's ledger, recomputed independently from the events its entries record
    (`dphpo.privacy.events`: the same events the ledger's own accountants read); (None, why) where no
    independent implementation reads them. Where numerical (PLD), the ε is an upper bound."""
    try:
        events, delta = _ledger_events(record)
    except (KeyError, ValueError) as exc:
        return None, f"unreadable ledger entry: {exc}"
    kinds = {type(event) for event, _ in events}
    if kinds <= {Gaussian}:
        return gdp_eps(math.sqrt(sum(count * e.mu**2 for e, count in events)), delta), "GDP closed form (scipy)"
    if RdpCurve in kinds:
        how = "RDP curves summed, dp_accounting conversion"
        return _rdp_eps(events, delta), how + (" (fractional orders)" if PoissonSampledGaussian in kinds else "")
    if kinds <= {Gaussian, PoissonSampledGaussian}:
        return _pld_eps(events, delta), PLD_HOW
    return None, f"no independent accountant reads {', '.join(sorted(k.kind for k in kinds))} events"


PLD_HOW = "dp_accounting PLD (Poisson-subsampled Gaussians + Gaussians)"


def claim_problems(claimed: float, record: dict, eps: float, how: str) -> list[str]:
    """How a claimed total ε disagrees with its ledger, recomputed as `eps` by `how` (`recompute`).

    One-sided where it matters: a claim below what the ledger provably costs fails with no tolerance —
    below the recomputed ε of a closed form or RDP (the same arithmetic); for the numerical PLD, whose ε
    is an upper bound that a correct claim (prv-accountant's upper bound) may undercut by its
    discretisation, below prv-accountant's lower bound on the true ε (`_prv_lower`). A claim far above
    the recomputed ε (beyond the discretisation tolerance: an entry missing from the ledger?) fails too;
    RDP with Poisson runs may claim more by that tolerance (the ledger rounds their orders up to
    integers, dp_accounting evaluates them as given)."""
    floor = eps
    if how == PLD_HOW and claimed < eps:  # between the bounds a claim may be right: only below the lower one fails
        try:
            floor = _prv_lower(*_ledger_events(record))
        except (ValueError, RuntimeError, ArithmeticError) as err:  # no lower bound: the claim is below an upper one
            return [f"claimed ε {claimed:.6g} is below the ledger's {eps:.6g}, and prv-accountant gave no lower bound "
                    f"to compare it with ({type(err).__name__}: {err})"]
    if claimed < floor * (1 - EXACT_RTOL) - 1e-12:
        bound = "a lower bound on the ledger's ε (prv-accountant)" if floor != eps else "the ledger's"
        return [f"claimed ε {claimed:.6g} is below {bound} {floor:.6g}"]
    exact = how.startswith("GDP") or how == "RDP curves summed, dp_accounting conversion"
    rtol, atol = (EXACT_RTOL, 1e-12) if exact else (NUMERIC_RTOL, NUMERIC_ATOL)
    if eps < claimed * (1 - rtol) - atol:
        return [f"claimed ε {claimed:.6g} does not match the ledger's {eps:.6g} (an entry missing?)"]
    return []


def _dp_accounting_event(event: PoissonSampledGaussian) -> Any:
    from dp_accounting import dp_event

    return dp_event.PoissonSampledDpEvent(float(event.q), dp_event.GaussianDpEvent(float(event.sigma)))


def _rdp_eps(events: list[tuple[Event, int]], delta: float) -> float:
    from dp_accounting.rdp import rdp_privacy_accountant as rdp

    orders = sorted({float(o) for e, _ in events if isinstance(e, RdpCurve) for o in e.orders})
    total = [0.0] * len(orders)
    for e, count in events:
        if isinstance(e, Gaussian):
            curve = [lam * e.mu**2 / 2 for lam in orders]
        elif isinstance(e, RdpCurve):
            curve = [_rdp_at(list(e.orders), list(e.values), lam) for lam in orders]
        else:
            acc = rdp.RdpAccountant(orders)
            acc.compose(_dp_accounting_event(e), int(e.steps))
            curve = list(acc._rdp)  # the accountant's composed RDP at `orders`
        total = [t + count * c for t, c in zip(total, curve)]
    eps, _ = rdp.compute_epsilon(orders, total, delta)
    return float(eps)


def _pld_eps(events: list[tuple[Event, int]], delta: float) -> float:
    """An upper bound on the ε of Poisson-subsampled Gaussian runs and Gaussians, composed by dp_accounting's
    privacy loss distributions (add or remove one, pessimistic rounding on a 1e-3 grid)."""
    from dp_accounting import dp_event
    from dp_accounting.pld import pld_privacy_accountant as pld

    acc = pld.PLDAccountant(value_discretization_interval=1e-3)
    mu_sq = 0.0
    for e, count in events:
        if isinstance(e, Gaussian):
            mu_sq += count * e.mu**2
        else:
            acc.compose(_dp_accounting_event(e), int(e.steps) * count)
    if mu_sq > 0:
        acc.compose(dp_event.GaussianDpEvent(1.0 / math.sqrt(mu_sq)))
    return float(acc.get_epsilon(delta))


def _prv_lower(events: list[tuple[Event, int]], delta: float) -> float:
    """prv-accountant's lower bound on the true ε of the same events (its ε_lower at eps_error 0.01, called
    here directly: the true ε is at least this; dp_accounting's optimistic PLD rounding is far looser over
    thousands of steps). A run with q = 1 is a Gaussian of μ = √T/σ."""
    from prv_accountant import PRVAccountant
    from prv_accountant.privacy_random_variables import GaussianMechanism, PoissonSubsampledGaussianMechanism

    prvs, counts, mu_sq = [], [], 0.0
    for e, count in events:
        if isinstance(e, Gaussian):
            mu_sq += count * e.mu**2
        elif float(e.q) >= 1.0:
            mu_sq += count * int(e.steps) / float(e.sigma) ** 2
        else:
            prvs.append(PoissonSubsampledGaussianMechanism(sampling_probability=float(e.q), noise_multiplier=float(e.sigma)))
            counts.append(int(e.steps) * count)
    if mu_sq > 0:
        prvs.append(GaussianMechanism(noise_multiplier=1.0 / math.sqrt(mu_sq)))
        counts.append(1)
    if not prvs:
        return 0.0
    acc = PRVAccountant(prvs=prvs, max_self_compositions=counts, eps_error=0.01, delta_error=delta / 1000.0)
    return float(acc.compute_epsilon(delta=delta, num_self_compositions=counts)[0])


# ------------------------------------------------------------------------------------------
# the tree


def _uncovered(value: Any, where: str = "") -> list[str]:
    found = []
    if isinstance(value, dict):
        for k, v in value.items():
            path = f"{where}.{k}" if where else k
            if k in INTERNAL_KEYS:
                found.append(path)
            found += _uncovered(v, path)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found += _uncovered(v, f"{where}[{i}]")
    return found


def _load_sealed(path: Path) -> tuple[Any, list[str]]:
    """The JSON document and its seal problems (a missing seal is a problem)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        return None, [f"unreadable ({err})"]
    if not isinstance(data, dict):
        return data, ["not a sealed record"]
    stored = data.pop(SEAL_KEY, None)
    if stored is None:
        return data, [f"no {SEAL_KEY}: the seal was removed"]
    try:
        sealed = seal(data)
    except ValueError:  # NaN or inf: no release holds one (write_json stores them as null or "inf")
        return data, ["holds a non-finite number (NaN or Infinity), which no dphpo record holds: edited"]
    if stored != sealed:
        return data, [f"{SEAL_KEY} does not match the content: edited after it was written"]
    return data, []


def check_record(record: dict, file: str, expected_hash: str | None = None) -> Check:
    check = Check(file, str(record.get("method")), record.get("total_eps"))
    if not accounted(record):
        check.how = "search not accounted (ε = ∞): nothing to recompute"
        if record.get("total_eps") not in ("inf", math.inf):
            check.problems.append(f"states total ε {record.get('total_eps')} for a search that is not accounted (ε = ∞)")
        return check
    try:
        eps, check.how = recompute(record)
    except (KeyError, TypeError, ValueError) as err:
        check.problems.append(f"ledger cannot be recomputed ({type(err).__name__}: {err})")
        eps = None
    else:
        if eps is None:  # a DP release is a claim its ledger must back: an unreadable one backs nothing
            check.problems.append(f"ledger cannot be recomputed ({check.how})")
    check.recomputed_eps = eps
    claimed = record.get("total_eps")
    if claimed is None:
        check.problems.append("states no total_eps: a DP release states its total ε")
    stated_total = ((record.get("privacy") or {}).get("total") or {}).get("eps")
    target = (record.get("target") or {}).get("eps")
    if eps is not None and claimed is not None:
        check.problems += claim_problems(float(claimed), record, eps, check.how)
    if stated_total is not None and claimed is not None and not math.isclose(stated_total, claimed, rel_tol=1e-12):
        check.problems.append(f"total_eps {claimed} differs from privacy.total.eps {stated_total}")
    if claimed is not None and target is not None and claimed > target * (1 + 1e-9):
        check.problems.append(f"total ε {claimed:.6g} exceeds the target {target:g}")
    target_delta, total_delta = (record.get("target") or {}).get("delta"), record.get("total_delta")
    if target_delta is not None and total_delta is not None and float(total_delta) > float(target_delta) * (1 + 1e-9):
        check.problems.append(f"total δ {float(total_delta):.3g} exceeds the target {float(target_delta):.3g}")
    if record.get("trials_released") == "selected":  # a secret number of trials: no index, count or list
        named = sorted(TRIAL_COUNT_KEYS & (set(record.get("released") or {}) | set(record.get("search") or {})))
        if named or record.get("trials"):
            check.problems.append("a best-trial-only release reveals its secret number of trials: "
                                  + ", ".join(named + (["trials"] if record.get("trials") else [])))
    leaked = _uncovered({k: v for k, v in record.items() if k != "internal_fields"})
    if leaked or "internal" in record:
        check.problems.append("fields the guarantee does not cover: " + ", ".join(leaked[:5] or ["internal log"]))
    if expected_hash is not None:
        got = (record.get("provenance") or {}).get("config_hash")
        if got != expected_hash:
            check.problems.append(f"config hash {str(got)[:12]} is not the given config's {expected_hash[:12]}")
    return check


#: The released model's file beside its result.json: vision (linear head) and language.
MODEL_FILES = ("model.npz", "model.pt")


def model_problems(result_path: Path, record: dict) -> list[str]:
    """Whether the model beside a release is the one it records (`model_sha256`, sealed with the record)."""
    want = record.get("model_sha256")
    if want is None:
        return []
    model = next((result_path.with_name(m) for m in MODEL_FILES if result_path.with_name(m).is_file()), None)
    if model is None:
        return [f"its model ({' or '.join(MODEL_FILES)}) is missing"]
    if file_sha256(model) != want:
        return [f"{model.name} is not the model this release trained (its sha256 is not the record's model_sha256): replaced"]
    return []


def expected_hashes(config: dict) -> dict[str, str]:
    """{variant: config hash} a validated config asks for."""
    return {v: config_hash(study_config.variant_config(copy.deepcopy(config), v)) for v in [study_config.DEFAULT_VARIANT, *config.get("variants", {})]}


def verify_tree(root: str | Path, config_paths: Sequence[str | Path] | None = None,
                config: dict | None = None) -> tuple[list[Check], dict[str, Any]]:
    """Every release under `root` checked; returns the checks and a summary. With `config_paths` (read
    as `snakemake --configfile` reads them; `config`: already read from them), also that every release
    the config's study implies is there and that no other release of its studies is (completeness)."""
    root = Path(root)
    if config is None and config_paths:
        config = load_config(config_paths)
    hashes = expected_hashes(config) if config is not None else None
    checks: list[Check] = []
    files = sorted(root.rglob("result.json")) + sorted(root.rglob("results.json"))
    for path in files:
        rel = str(path.relative_to(root))
        data, problems = _load_sealed(path)
        records = data.get("results", []) if isinstance(data, dict) and path.name == "results.json" else [data]
        for i, record in enumerate(records):
            if not isinstance(record, dict):
                checks.append(Check(rel, "?", None, problems=problems or ["not a release record"]))
                continue
            variant = (record.get("provenance") or {}).get("variant", "default")
            vision = path.name == "result.json" and "language" not in path.parts
            expect = hashes.get(variant) if hashes is not None and vision else None
            check = check_record(record, rel if len(records) == 1 else f"{rel}[{i}]", expect)
            if len(records) == 1:  # a record moved into another run's folder (two targets swapped, say)
                check.problems += [f"not the record its path names: {p}" for p in study_config.identity_problems(rel, record)]
                check.problems += model_problems(path, record)
            if hashes is not None and vision and variant not in hashes:
                check.problems.append(f"variant {variant!r} is not in the given config")
            check.problems[:0] = problems
            checks.append(check)
    missing = _completeness(config, checks) if config is not None else []
    internal = sorted(str(p.relative_to(root)) for p in root.rglob("*internal.json"))  # staged ones too (layout.language_staged)
    private = [c for c in checks if c.recomputed_eps is not None and c.claimed_eps is not None]
    summary = {
        "releases": len(checks),
        "failed": sum(not c.ok for c in checks),
        "missing (the config implies them)": len(missing) if config is not None else None,
        "largest |claimed − recomputed| ε": max((abs(c.claimed_eps - c.recomputed_eps) for c in private), default=None),
        "internal logs found (never publish them)": len(internal),
        "config checked": ", ".join(map(str, config_paths)) if config_paths else None,
    }
    return checks + missing, summary


def implied_releases(config: dict) -> set[str]:
    """The result.json files (relative to the results tree) the config's study (target `all`) implies."""
    return {p.removeprefix(layout.ROOT + "/") for p in study_config.study_results(config)}


def missing_releases(config: dict, found: Sequence[str], skip_methods: Sequence[str] = ()) -> list[str]:
    """The releases the config's study implies (`implied_releases`) that `found` lacks, but those of `skip_methods`."""
    return sorted(rel for rel in implied_releases(config) - set(found) if layout.parse(layout.RESULT, rel)["method"] not in skip_methods)


MISSING = "missing: the config's study implies this release"


def _completeness(config: dict, checks: list[Check]) -> list[Check]:
    """A failed check per release the config's study (target `all`) implies that is missing, and a
    problem added to each release of its studies and rule variants that the config does not imply
    (another method, seed or target ε). Releases of other variants (the paper target's ablations) are
    not enumerated here."""
    expected = implied_releases(config)
    found = {c.file: c for c in checks if layout.parse(layout.RESULT, c.file)}
    missing = [Check(rel, str(layout.parse(layout.RESULT, rel)["method"]), None, problems=[MISSING])
               for rel in sorted(expected - set(found))]
    studies = {(s["dataset"], s["extractor"]) for s in config["studies"]}
    variants = set(study_config.rule_variants(config))
    for rel in sorted(set(found) - expected):
        wc = layout.parse(layout.RESULT, rel)
        if (wc["dataset"], wc["extractor"]) in studies and wc["variant"] in variants:
            found[rel].problems.append("not implied by the config (another method, seed or target ε)")
    return missing
