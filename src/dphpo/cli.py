"""`dphpo` command line: subcommands over the same functions the workflow uses.

Every calculator prints the asked number alone on its last line (full float precision), or with
`--json` one JSON object holding every field. Bad input exits with code 2 and a message naming the
flag; so does an infeasible budget plan.

Other subcommand groups register a builder in `SUBCOMMAND_BUILDERS`: a function taking the
`subparsers` object of the top-level parser, adding its parser, and setting `handler` (args → int).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from dphpo.audit import MAX_RUNS, MIN_RUNS
from dphpo.errors import ConfigError, DPHPOError
from dphpo.io import check_writable, write_text

# ------------------------------------------------------------------------------------------------
# argument types: each error names the flag (argparse prefixes "argument --flag:")


def positive_float(text: str) -> float:
    x = _float(text)
    if not (x > 0 and math.isfinite(x)):
        raise argparse.ArgumentTypeError(f"must be a positive finite number, got {text!r}")
    return x


def nonnegative_float(text: str) -> float:
    x = _float(text)
    if not (x >= 0 and math.isfinite(x)):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text!r}")
    return x


def probability(text: str) -> float:
    x = _float(text)
    if not 0.0 < x < 1.0:
        raise argparse.ArgumentTypeError(f"must lie in (0, 1), got {text!r}")
    return x


def rate(text: str) -> float:
    x = _float(text)
    if not 0.0 < x <= 1.0:
        raise argparse.ArgumentTypeError(f"must lie in (0, 1], got {text!r}")
    return x


def mean_at_least_one(text: str) -> float:
    x = _float(text)
    if not (x >= 1.0 and math.isfinite(x)):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 1, got {text!r}")
    return x


def _int_at_least(text: str, lowest: int) -> int:
    try:
        x = int(text)
    except ValueError:
        x = lowest - 1
    if x < lowest:
        raise argparse.ArgumentTypeError(f"must be an integer >= {lowest}, got {text!r}")
    return x


# Calculator ranges: beyond them the closed forms overflow and the solvers give up (mu = 100 is
# eps ~ 5,400 at delta = 1e-5; eps = 1,000 is mu ~ 41), so a flag out of range is named instead.
MU_MAX = 100.0
EPS_MAX = 1000.0


def _bounded(text: str, low: float, high: float, low_open: bool) -> float:
    x = _float(text)
    inside = (low < x if low_open else low <= x) and x <= high
    if not inside:
        bracket = "(" if low_open else "["
        raise argparse.ArgumentTypeError(f"must lie in {bracket}{low:g}, {high:g}], got {text!r}")
    return x


def gdp_mu(text: str) -> float:
    return _bounded(text, 0.0, MU_MAX, low_open=True)


def gdp_mu_or_zero(text: str) -> float:
    return _bounded(text, 0.0, MU_MAX, low_open=False)


def target_eps_value(text: str) -> float:
    return _bounded(text, 0.0, EPS_MAX, low_open=True)


def positive_int(text: str) -> int:
    return _int_at_least(text, 1)


def nonnegative_int(text: str) -> int:
    return _int_at_least(text, 0)


def audit_runs(text: str) -> int:
    """Audit runs per budget, within `dphpo.audit.MIN_RUNS`..`MAX_RUNS`."""
    x = _int_at_least(text, MIN_RUNS)
    if x > MAX_RUNS:
        raise argparse.ArgumentTypeError(f"at most {MAX_RUNS:,} runs per budget, got {text}")
    return x


def max_train_arg(text: str) -> int | None:
    """A subset size (an integer >= 1), or `all` for the whole training split."""
    return None if text.strip().lower() == "all" else _int_at_least(text, 1)


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


# ------------------------------------------------------------------------------------------------
# output


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if hasattr(obj, "item") and not isinstance(obj, (str, bytes)):  # numpy scalars
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    return obj


def _emit(args: argparse.Namespace, value: float, fields: dict[str, Any], header: str) -> int:
    if args.json:
        print(json.dumps(_jsonable(fields)))
    else:
        print(header)
        print(repr(float(value)))
    return 0


def _note(message: str) -> None:
    """A remark on stderr, which leaves the printed number (and --json's object) alone."""
    print(f"note: {message}", file=sys.stderr)


def _fail(prog: str, message: str) -> int:
    print(f"{prog}: error: {' '.join(message.split())}", file=sys.stderr)
    return 2


# ------------------------------------------------------------------------------------------------
# dphpo privacy ...


#: The `accountant` field of the calculators whose numbers are closed forms (the run calculators
#: give their run accountant's `describe()`, which has the same name and formula keys).
GDP_CLOSED_FORM = {"name": "gdp", "formula": "exact GDP closed form, delta(eps) of mu-GDP (Dong, Roth & Su 2022, Cor. 2.13)"}
PS_TUNING = {"name": "rdp", "formula": "RDP of Papernot-Steinke tuning with a random number of trials (Papernot & Steinke 2022)"}


def _privacy_eps(args: argparse.Namespace) -> int:
    from dphpo.privacy.gdp import eps_from_mu

    eps = eps_from_mu(args.mu, args.delta)
    return _emit(
        args,
        eps,
        {"eps": eps, "mu": args.mu, "delta": args.delta, "accountant": GDP_CLOSED_FORM},
        f"eps of a mu={args.mu:g}-GDP mechanism at delta={args.delta:g}:",
    )


def _privacy_mu(args: argparse.Namespace) -> int:
    from dphpo.privacy.gdp import mu_from_eps

    mu = mu_from_eps(args.eps, args.delta)
    return _emit(
        args,
        mu,
        {"mu": mu, "eps": args.eps, "delta": args.delta, "accountant": GDP_CLOSED_FORM},
        f"largest mu whose mu-GDP implies (eps={args.eps:g}, delta={args.delta:g})-DP:",
    )


def _run_accountant(args: argparse.Namespace):
    """The run accountant the flags ask for (`dphpo.privacy.accountant.make_accountant`, as the workflow)."""
    from dphpo.privacy.accountant import make_accountant

    sample_rate = None if args.sample_rate in (None, 1.0) else args.sample_rate
    if sample_rate is not None and args.adjacency != "add_remove":
        args.parser.error("--sample-rate below 1 (Poisson-subsampled steps) is accounted for --adjacency add_remove only")
    if sample_rate is not None and args.accountant == "gdp":
        _note("--accountant gdp with --sample-rate below 1: Poisson-subsampled steps have no exact GDP form; "
              "they are accounted by rdp, as the workflow accounts them")
    return make_accountant(args.accountant, args.delta, args.adjacency, sample_rate, args.eps_error)


def _run_fields(args: argparse.Namespace, accountant: Any, sigma: float) -> dict[str, Any]:
    fields = {
        "sigma": sigma,
        "steps": args.steps,
        "delta": args.delta,
        "standalone_eps": accountant.standalone_eps(sigma, args.steps),
        "accountant": accountant.describe(),
    }
    mu = accountant.run_mu(sigma, args.steps)  # None unless the run is exactly μ-GDP
    if mu is not None:
        fields["mu"] = mu
    return fields


def _privacy_sigma(args: argparse.Namespace) -> int:
    accountant = _run_accountant(args)
    sigma = accountant.sigma_for_eps(args.eps, args.steps)
    fields = _run_fields(args, accountant, sigma) | {"eps": args.eps}
    return _emit(
        args,
        sigma,
        fields,
        f"noise multiplier for {args.steps} steps at (eps={args.eps:g}, delta={args.delta:g}), "
        f"{accountant.name} accountant ({args.adjacency}, sample rate {args.sample_rate or 1:g}):",
    )


def _privacy_run_eps(args: argparse.Namespace) -> int:
    accountant = _run_accountant(args)
    fields = _run_fields(args, accountant, args.sigma)
    return _emit(
        args,
        fields["standalone_eps"],
        fields,
        f"eps of {args.steps} steps at sigma={args.sigma:g}, delta={args.delta:g}, {accountant.name} accountant "
        f"({args.adjacency}, sample rate {args.sample_rate or 1:g}):",
    )


def _privacy_plan(args: argparse.Namespace) -> int:
    from dphpo.privacy.planning import plan_stages

    if args.stage_eps is not None:
        if args.eps1 is not None or args.eps2 is not None:
            args.parser.error("give either --stage-eps or --eps1/--eps2, not both")
        stage_eps = list(args.stage_eps)
    else:
        if args.eps1 is None or args.eps2 is None:
            args.parser.error("--eps1 and --eps2 are required (or --stage-eps E1 E2 ...)")
        stage_eps = [args.eps1, args.eps2]
    selection = _planned_selection(args, len(stage_eps))
    plan = plan_stages(
        args.total_eps,
        args.delta,
        n_trials=args.n,
        stage_eps=stage_eps,
        selection_mu=args.selection_mu,
        selections_per_stage=args.selections_per_stage,
    )
    fields = {k: v for k, v in plan.items() if k != "ledger"}
    fields["target_eps"] = args.total_eps
    fields["ledger"] = plan["ledger"].to_dict(args.delta)
    if selection is not None:
        fields["selection_plan"] = {"noise_std": selection.noise_std, "signal": selection.signal, "why": selection.why()}
        if not args.json:
            print(selection.why())
    if args.n_parameters is not None:
        fields["stage_signal"] = _stage_signal(args, stage_eps[0])
        if not args.json:
            print(fields["stage_signal"]["why"])
    return _emit(
        args,
        plan["final_eps"],
        fields,
        f"standalone eps of the final run (total eps={plan['total_eps']:.6g} at delta={args.delta:g}, "
        f"final mu={plan['final_mu']:.6g}):",
    )


def _stage_signal(args: argparse.Namespace, eps_1: float) -> dict:
    """With --n-parameters: the first stage's public signal-to-noise μ₁N/√P against the recommended rule's
    threshold (`Safeguard.stage_snr`): below it the rule skips its stages."""
    from dphpo.hpo.linear_scaling_plan import RECOMMENDED_SAFEGUARD, first_stage_snr

    if args.n_public is None:
        args.parser.error("--n-parameters needs --n-public (the public size N of mu_1*N/sqrt(P))")
    snr, threshold = first_stage_snr(eps_1, args.delta, args.n_public, args.n_parameters), RECOMMENDED_SAFEGUARD.stage_snr
    runs = snr >= threshold
    verdict = ("the recommended rule runs its stages" if runs else
               "NO SIGNAL: stage trials this noisy learn about as much at any r; the recommended rule skips its stages and "
               "spends the whole budget on one run at the public prior r (linear_scaling.safeguard.stage_snr)")
    why = (f"stage 1 at eps={eps_1:g}: mu_1*N/sqrt(P) = {snr:.3g} with N = {args.n_public}, P = {args.n_parameters} "
           f"(threshold {threshold:g}); {verdict}")
    return {"snr": snr, "threshold": threshold, "stages_run": runs, "why": why}


def _planned_selection(args: argparse.Namespace, n_stages: int):
    """With --n-public: the selection noise the planner chooses (`selection.noise_std: auto`), whose μ
    replaces --selection-mu."""
    if args.n_public is None:
        return None
    from dphpo.hpo.selection import plan_selection_noise

    if args.selection_mu:
        args.parser.error("give either --selection-mu or --n-public (the planner's noise), not both")
    releases = n_stages * (args.n if args.selections_per_stage is None else args.selections_per_stage)
    plan = plan_selection_noise(args.n_public, args.total_eps, args.delta, max(1, releases))
    args.selection_mu = 1.0 / plan.noise_std
    return plan


def _poisson_delta_field(args: argparse.Namespace) -> dict[str, str]:
    """--poisson-delta as recorded: it only applies to a Poisson number of trials."""
    return {"poisson_delta": args.poisson_delta} if args.distribution == "poisson" else {}


def _check_eta(args: argparse.Namespace) -> float | None:
    if args.distribution == "tnb" and args.eta is None:
        args.parser.error("--eta is required with --distribution tnb")
    if args.poisson_delta is None:
        args.poisson_delta = "gdp"
    elif args.distribution != "poisson":
        args.parser.error(f"--poisson-delta applies to --distribution poisson only, not {args.distribution}")
    fixed = {"logarithmic": 0.0, "geometric": 1.0}
    if args.eta is not None:
        if args.distribution == "poisson":
            args.parser.error("--eta does not apply to --distribution poisson")
        if args.distribution in fixed and args.eta != fixed[args.distribution]:
            args.parser.error(
                f"--eta={args.eta:g} conflicts with --distribution {args.distribution} (eta={fixed[args.distribution]:g})"
            )
        if args.distribution == "tnb" and not (args.eta > -1 and math.isfinite(args.eta)):
            args.parser.error(f"--eta must be a finite number > -1, got {args.eta:g}")
    return args.eta


def _privacy_select(args: argparse.Namespace) -> int:
    from dphpo.privacy.gdp import eps_from_mu
    from dphpo.privacy.tuning import ps_tuned_eps, resolve_distribution

    eta = _check_eta(args)
    eps = ps_tuned_eps(
        args.mu_trial, args.distribution, args.mean_trials, eta, args.delta, poisson_delta=args.poisson_delta
    )
    _, eta_v = resolve_distribution(args.distribution, eta)
    fields = {
        "eps": eps,
        "mu_trial": args.mu_trial,
        "eps_trial": eps_from_mu(args.mu_trial, args.delta),
        "mean_trials": args.mean_trials,
        "distribution": args.distribution,
        "eta": eta_v,
        "delta": args.delta,
        "accountant": PS_TUNING,
    } | _poisson_delta_field(args)
    return _emit(
        args,
        eps,
        fields,
        f"eps of Papernot-Steinke tuning ({args.distribution} K, E[K]={args.mean_trials:g}, "
        f"mu_trial={args.mu_trial:g}) at delta={args.delta:g}:",
    )


def _privacy_select_mu(args: argparse.Namespace) -> int:
    from dphpo.privacy.gdp import eps_from_mu
    from dphpo.privacy.tuning import calibrate_ps_mu, ps_tuned_eps, resolve_distribution

    eta = _check_eta(args)
    mu = calibrate_ps_mu(args.eps, args.delta, args.distribution, args.mean_trials, eta, poisson_delta=args.poisson_delta)
    fields = {
        "mu_trial": mu,
        "eps_trial": eps_from_mu(mu, args.delta),
        "target_eps": args.eps,
        "eps": ps_tuned_eps(mu, args.distribution, args.mean_trials, eta, args.delta, poisson_delta=args.poisson_delta),
        "mean_trials": args.mean_trials,
        "distribution": args.distribution,
        "eta": resolve_distribution(args.distribution, eta)[1],
        "delta": args.delta,
        "accountant": PS_TUNING,
    } | _poisson_delta_field(args)
    return _emit(
        args,
        mu,
        fields,
        f"per-trial mu so that Papernot-Steinke tuning ({args.distribution} K, E[K]={args.mean_trials:g}) "
        f"is (eps={args.eps:g}, delta={args.delta:g})-DP:",
    )


def _privacy_prv_eps(args: argparse.Namespace) -> int:
    from dphpo.privacy.prv import prv_eps_bounds_subsampled_gaussian

    out = prv_eps_bounds_subsampled_gaussian(args.q, args.sigma, args.steps, args.delta, args.eps_error)
    out["accountant"] = {"name": "prv", "formula": out["accountant"], "eps_error": args.eps_error}
    if args.eps_error >= out["eps_estimate"]:
        _note(
            f"--eps-error {args.eps_error!r} is at least the estimate eps={out['eps_estimate']:.4g}: the upper bound is "
            "mostly the error margin; a smaller --eps-error tightens it"
        )
    return _emit(
        args,
        out["eps_upper"],
        out,
        f"eps (PRV upper bound) of {args.steps} Poisson-subsampled Gaussian steps, q={args.q:g}, "
        f"sigma={args.sigma:g}, delta={args.delta:g}:",
    )


#: What the numerical code under a calculator raises for inputs beyond what it can compute (a root
#: bracket lost in float overflow, prv-accountant's grid); reported with the flags that led there.
_NUMERIC_ERRORS = (ValueError, ArithmeticError)


def _calculator(handler: Callable[[argparse.Namespace], int], prog: str) -> Callable[[argparse.Namespace], int]:
    """`handler` with its errors reported as usage errors of `prog` (exit 2): a DPHPOError (an infeasible
    plan, a refused grid) as it is; a numerical failure prefixed by the flags the user set."""

    def run(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except DPHPOError as err:
            return _fail(prog, str(err))
        except _NUMERIC_ERRORS as err:
            return _fail(prog, f"{_given_flags(args)}: out of the range this calculator can compute ({err})")

    return run


def _given_flags(args: argparse.Namespace) -> str:
    """The options of `args.parser` the user set to other than their defaults, as typed (`--sigma 1e-300`)."""
    given = []
    for action in args.parser._actions:
        value = getattr(args, action.dest, None)
        if not action.option_strings or action.dest in ("help", "json") or value in (None, action.default):
            continue
        shown = " ".join(repr(v) if isinstance(v, float) else str(v) for v in (value if isinstance(value, list) else [value]))
        given.append(f"{action.option_strings[0]} {shown}")
    return " ".join(given)


def add_privacy_parser(subparsers: Any) -> argparse.ArgumentParser:
    """`dphpo privacy {eps,mu,sigma,run-eps,plan,select,select-mu,prv-eps}`: the privacy calculators."""
    privacy = subparsers.add_parser(
        "privacy",
        help="privacy calculators (GDP, budget plans, P&S tuning, PRV)",
        description="Privacy calculators over dphpo.privacy.",
    )
    sub = privacy.add_subparsers(dest="privacy_command", metavar="COMMAND")
    privacy.set_defaults(handler=lambda args: _missing(privacy))
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print one JSON object with every field")

    def leaf(name: str, handler: Callable[[argparse.Namespace], int], help_: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, parents=[common], help=help_, description=help_)
        p.set_defaults(handler=_calculator(handler, f"dphpo privacy {name}"), parser=p)
        return p

    p = leaf("eps", _privacy_eps, "eps of a mu-GDP mechanism at delta")
    p.add_argument("--mu", type=gdp_mu, required=True, help="GDP parameter mu")
    p.add_argument("--delta", type=probability, required=True)

    p = leaf("mu", _privacy_mu, "largest mu such that mu-GDP implies (eps, delta)-DP")
    p.add_argument("--eps", type=target_eps_value, required=True)
    p.add_argument("--delta", type=probability, required=True)

    for name, handler, text in (
        ("sigma", _privacy_sigma, "smallest noise multiplier sigma whose run of T steps alone is (eps, delta)-DP "
         "(exact GDP, full batch: sigma = factor sqrt(T)/mu(eps, delta))"),
        ("run-eps", _privacy_run_eps, "eps (at delta) of one run of T steps at noise multiplier sigma"),
    ):
        p = leaf(name, handler, text)
        if name == "sigma":
            p.add_argument("--eps", type=target_eps_value, required=True)
        else:
            p.add_argument("--sigma", type=positive_float, required=True, help="noise multiplier")
        p.add_argument("--delta", type=probability, required=True)
        p.add_argument("--steps", type=positive_int, required=True, help="number of steps T")
        p.add_argument(
            "--accountant",
            choices=["gdp", "rdp", "prv"],
            default="gdp",
            help="gdp: exact GDP of full-batch runs (default); rdp: Renyi DP; prv: prv-accountant upper bound "
            "(as privacy.accountant)",
        )
        p.add_argument(
            "--adjacency",
            choices=["add_remove", "replace_one"],
            default="add_remove",
            help="replace_one doubles the sensitivity of every step (as privacy.adjacency)",
        )
        p.add_argument(
            "--sample-rate",
            type=rate,
            default=None,
            help="Poisson sampling rate q = B/N of minibatch steps (default: full batch; gdp then falls back to rdp)",
        )
        p.add_argument("--eps-error", type=positive_float, default=0.01, help="prv accountant's eps error")

    p = leaf(
        "plan",
        _privacy_plan,
        "linear scaling rule budget plan: standalone eps of the final run after n trials per stage",
    )
    p.add_argument("--total-eps", type=target_eps_value, required=True, help="target total eps (search + final run)")
    p.add_argument("--delta", type=probability, required=True)
    p.add_argument("--n", type=positive_int, required=True, help="trials per stage")
    p.add_argument("--eps1", type=target_eps_value, help="standalone eps of each stage-1 trial")
    p.add_argument("--eps2", type=target_eps_value, help="standalone eps of each stage-2 trial")
    p.add_argument(
        "--stage-eps",
        type=target_eps_value,
        nargs="+",
        metavar="EPS",
        help="standalone eps per trial of each stage (instead of --eps1/--eps2)",
    )
    p.add_argument(
        "--selection-mu",
        type=gdp_mu_or_zero,
        default=0.0,
        help="mu of each noisy selection score release (0: free selection)",
    )
    p.add_argument(
        "--selections-per-stage",
        type=nonnegative_int,
        default=None,
        help="noisy score releases per stage (default: --n)",
    )
    p.add_argument(
        "--n-public",
        type=positive_int,
        default=None,
        help="public size N of the training set: the selection noise is planned from it (selection.noise_std: auto), "
        "and the plan says whether released scores that noisy can rank trials",
    )
    p.add_argument(
        "--n-parameters",
        type=positive_int,
        default=None,
        help="weights P of the trained head (d x K): with --n-public, the plan says whether stage 1's trials can learn "
        "enough to be ranked (mu_1*N/sqrt(P), linear_scaling.safeguard.stage_snr)",
    )

    for name, handler, text in (
        ("select", _privacy_select, "eps of Papernot-Steinke tuning with mu_trial-GDP trials"),
        ("select-mu", _privacy_select_mu, "per-trial mu so that Papernot-Steinke tuning hits a target eps"),
    ):
        p = leaf(name, handler, text)
        if name == "select":
            p.add_argument("--mu-trial", type=gdp_mu, required=True, help="GDP mu of each trial")
        else:
            p.add_argument("--eps", type=target_eps_value, required=True, help="target eps of the whole tuning")
        p.add_argument("--mean-trials", type=mean_at_least_one, required=True, help="E[K], expected number of trials")
        p.add_argument(
            "--distribution",
            choices=["logarithmic", "geometric", "tnb", "poisson"],
            required=True,
            help="distribution of the number of trials K",
        )
        p.add_argument(
            "--eta",
            type=_float_arg,
            default=None,
            help="shape of the truncated negative binomial (required for tnb; 0 logarithmic, 1 geometric)",
        )
        p.add_argument("--delta", type=probability, required=True)
        p.add_argument(
            "--poisson-delta",
            choices=["gdp", "rdp"],
            default=None,
            help="Poisson K only: delta-hat of a trial from exact GDP (default) or from its RDP curve",
        )

    p = leaf(
        "prv-eps", _privacy_prv_eps, "eps (PRV upper bound) of Poisson-subsampled Gaussian steps (minibatch DP-SGD)"
    )
    p.add_argument("--q", type=rate, required=True, help="sampling rate (batch size / N)")
    p.add_argument("--sigma", type=positive_float, required=True, help="noise multiplier")
    p.add_argument("--steps", type=positive_int, required=True)
    p.add_argument("--delta", type=probability, required=True)
    p.add_argument("--eps-error", type=positive_float, default=0.01)
    return privacy


# ------------------------------------------------------------------------------------------------
# dphpo audit


#: `dphpo audit`'s exit status when no bound exceeds its claim but some claim could not have been refuted
AUDIT_INCONCLUSIVE = 3


def _audit(args: argparse.Namespace) -> int:
    from dphpo.audit import THREAT_MODELS
    from dphpo.audit.run import AuditSpec, calibrate, check_spec_data, load_audit_data, run_audit
    from dphpo.audit.subset_canaries import summary as subset_summary
    from dphpo.io import check_writable
    from dphpo.report.audit import audit_table, write_audit

    models = THREAT_MODELS if args.threat_model == "both" else (args.threat_model,)
    # Every spec is checked before any data are loaded or any run is trained.
    specs = [
        AuditSpec(
            eps=eps,
            delta=args.delta,
            runs=args.runs,
            steps=args.steps,
            lr=args.lr,
            batch_size=args.batch_size,
            accountant=args.accountant,
            alpha=args.alpha,
            canary_norm=args.canary_norm,
            noise_scale=args.noise_scale,
            seed=args.seed,
            neighbours=args.neighbours,
            normalizer=args.normalizer,
            canary=args.canary,
        )
        for eps in args.eps
    ]
    if args.out:
        for suffix in (".md", ".csv", ".json"):
            check_writable(Path(args.out).with_suffix(suffix), "--out")
    data = load_audit_data(
        args.data, root=args.data_root, max_train=args.max_train, features=args.features
    )
    for spec in specs:
        check_spec_data(spec, data)
        try:  # an infeasible claim of any spec is refused before the first one trains
            calibrate(spec, data.n)
        except (ValueError, DPHPOError) as err:
            raise ConfigError(f"--eps {spec.eps:g}: {err}") from None
    progress = sys.stderr.isatty() if args.progress is None else args.progress
    results = [run_audit(spec, data, threat_models=models, progress=progress) for spec in specs]
    if args.out:
        write_audit(results, args.out)
    if args.json:
        print(json.dumps(_jsonable({"audits": [r.to_dict() for r in results]})))
    else:
        print(audit_table(results).to_markdown())
        print(subset_summary(data.subset_canaries))
        print(
            f"eps lower bounds (Clopper-Pearson, family-wise confidence {1 - args.alpha:g} per claim) "
            "for claimed eps "
            + " ".join(f"{e:g}" for e in args.eps)
            + ":"
        )
        for i, model in enumerate(models):
            print(f"{model}: " + " ".join(f"{float(r.rows[i]['eps_lower'])!r} ({r.rows[i]['verdict']})" for r in results))
    if not all(r.passed for r in results):
        return 1
    return 0 if all(r.conclusive for r in results) else AUDIT_INCONCLUSIVE


def add_audit_parser(subparsers: Any) -> argparse.ArgumentParser:
    """`dphpo audit`: empirical lower bounds on the ε of the linear-head trainer (exit 1 if one beats the claim)."""
    from dphpo.audit import CANARIES, NEIGHBOURS, NORMALIZERS
    from dphpo.audit import CONFIG_DEFAULTS as d  # the defaults of the workflow's `audit:` section

    text = (
        "Empirical privacy audit: train the linear-head DP-GD (or DP-SGD) many times on neighbouring "
        "datasets with and without a canary record and bound its eps from below (Clopper-Pearson on the "
        "best threshold attack). Exit status 1 when a lower bound exceeds the claimed eps; "
        f"{AUDIT_INCONCLUSIVE} when a claim is too large for this many runs to refute (more --runs)."
    )
    p = subparsers.add_parser("audit", help="empirical privacy audit of the trainer", description=text)
    p.set_defaults(handler=_audit, parser=p)
    p.add_argument("--eps", type=positive_float, nargs="+", required=True, help="claimed eps of one run (one or more)")
    p.add_argument("--delta", type=probability, default=d["delta"])
    p.add_argument("--runs", type=audit_runs, default=d["runs"], help=f"training runs per budget, half in each world ({MIN_RUNS} to {MAX_RUNS:,})")
    p.add_argument("--steps", type=positive_int, default=d["steps"], help="steps T of each run")
    p.add_argument("--lr", type=positive_float, default=d["lr"], help="learning rate (momentum 0.9, unit clipping)")
    p.add_argument("--batch-size", type=positive_int, default=None, help="expected Poisson batch size: audit DP-SGD")
    p.add_argument(
        "--accountant",
        choices=["gdp", "prv", "rdp"],
        default=None,
        help="calibration of sigma: gdp (full batch, default), prv (DP-SGD, default) or rdp (DP-SGD, as the workflow)",
    )
    p.add_argument(
        "--alpha",
        type=probability,
        default=d["alpha"],
        help="family-wise level: each of the m bounds of a claim is taken at alpha/m (Bonferroni), "
        "so all hold together with confidence 1 - alpha",
    )
    p.add_argument("--seed", type=nonnegative_int, default=d["seed"])
    p.add_argument("--data", default=d["data"], help="image dataset of the registry (raw pixels); default %(default)s")
    p.add_argument("--data-root", default="data", help="folder of downloaded datasets")
    p.add_argument("--features", default=None, help="audit on a feature cache (.h5) instead of --data")
    p.add_argument(
        "--max-train",
        type=max_train_arg,
        default=d["max_train"],
        help="per-record subset of about this many training records (`all`: the whole split), checked first by add/remove "
        "subset canaries (D vs D plus one record differ by at most that record); the guarantee holds for every dataset",
    )
    p.add_argument(
        "--threat-model",
        choices=["white-box", "black-box", "both"],
        default="white-box",
        help="white-box: every step's update; black-box: the final model's loss on the canary",
    )
    p.add_argument(
        "--neighbours",
        choices=NEIGHBOURS,
        default=NEIGHBOURS[0],
        help="add_remove (the workflow's adjacency): world 1 is D plus the canary, one record more; "
        "replace_one: the canary replaces an all-zero record, the same size in both worlds",
    )
    p.add_argument(
        "--normalizer",
        choices=NORMALIZERS,
        default=NORMALIZERS[0],
        help="public: divide the noisy sum by the declared size |D| in both worlds (the workflow's trainer); "
        "private_count: by each world's own record count, the OLD LEAKING trainer, to check the audit catches it",
    )
    p.add_argument(
        "--canary",
        choices=CANARIES,
        default=CANARIES[0],
        help="gradient: norm --canary-norm in a feature column of its own (worst-case gradient); "
        "zero: an all-zero record, so only the worlds' sizes differ",
    )
    p.add_argument("--canary-norm", type=positive_float, default=d["canary_norm"], help="norm of the gradient canary")
    p.add_argument(
        "--noise-scale",
        type=positive_float,
        default=1.0,
        help="train with noise_scale x the calibrated sigma (< 1: a deliberately broken mechanism)",
    )
    p.add_argument("--out", default=None, help="write the table: OUT.md, OUT.csv and OUT.json")
    p.add_argument("--json", action="store_true", help="print one JSON object with every field")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None, help="progress bars on stderr")
    return p


def _float_arg(text: str) -> float:
    x = _float(text)
    if math.isnan(x):
        raise argparse.ArgumentTypeError(f"not a number: {text!r}")
    return x


def _missing(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def _take_back_positionals(args: argparse.Namespace, names: tuple[str, ...], options: dict[str, Callable[[str], bool]]) -> None:
    """`--configfile A RESULTS OUT`, `--methods m RESULTS OUT`: argparse gives every word after a
    nargs=+ option to it. Take that option's trailing words that are not its own (`options[dest]`
    says which are: a file for --configfile, a method name for --methods) back as the missing
    positionals `names`, else say what is missing and where it goes."""
    missing = [n for n in names if getattr(args, n) is None]
    if not missing:
        return
    for dest, own in options.items():
        words = getattr(args, dest) or []
        tail = words[-len(missing):] if len(words) > len(missing) else []
        if tail and not any(own(w) for w in tail):
            setattr(args, dest, words[: -len(missing)])
            for name, word in zip(missing, tail, strict=True):
                setattr(args, name, word)
            return
    wanted = " ".join(n.upper() for n in names)
    given = [f"--{dest}" for dest in options if getattr(args, dest)]
    where = f" before {' and '.join(given)} (`{args.parser.prog} {wanted} {given[0]} ...`)" if given else ""
    args.parser.error(f"{' and '.join(n.upper() for n in missing)} missing: give {wanted}{where}")


def _is_file(word: str) -> bool:
    return Path(word).is_file()


def _verify(args: argparse.Namespace) -> int:
    from dphpo.release import is_bundle
    from dphpo.report.tables import Table
    from dphpo.verify import verify_tree

    _take_back_positionals(args, ("results_dir",), {"configfile": _is_file})
    root = Path(args.results_dir)
    if not root.is_dir():
        return _fail("dphpo verify", f"RESULTS_DIR {root} is not a directory")
    absent = [path for path in args.configfile or [] if not Path(path).is_file()]
    if absent:
        return _fail("dphpo verify", f"--configfile: no such file {', '.join(absent)}")
    if args.release:
        return _verify_release(root, args.configfile)
    checks, summary = verify_tree(root, args.configfile)
    if not checks:
        return _fail("dphpo verify", f"no release (result.json, results.json) under {root}")
    rows = [c.row() for c in checks]
    print(Table(list(rows[0]), rows, caption=f"dphpo verify {root}").to_markdown())
    print()
    for key, value in summary.items():
        print(f"{key}: {value}")
    if not is_bundle(root):
        print(f"note: {root} is a results tree, not a publishable bundle (it holds internal files); "
              f"build one with `dphpo release {root} OUT_DIR` and check it with `dphpo verify --release OUT_DIR`")
    return 0 if summary["failed"] == 0 and not summary["missing (the config implies them)"] else 1


def _verify_release(root: Path, config_paths: list[str] | None) -> int:
    from dphpo.release import verify_bundle

    problems = verify_bundle(root, config_paths)
    for problem in problems:
        print(f"FAIL {problem}")
    if problems:
        print(f"dphpo verify --release: {root} is NOT publishable ({len(problems)} problem(s))")
        return 1
    print(f"dphpo verify --release: {root} is a complete bundle: every file in MANIFEST, every release verified, "
          "the composed ε of each dataset recomputed"
          + (f"; every release the config implies present, each with its config hash ({' '.join(config_paths)})"
             if config_paths else ""))
    return 0


def _release(args: argparse.Namespace) -> int:
    from dphpo.hpo.registry import METHODS, NOT_DP_METHODS
    from dphpo.release import build_bundle, cap_dominates, unbundled
    from dphpo.studies.validate import load_config

    _take_back_positionals(
        args, ("results_dir", "out_dir"), {"configfile": _is_file, "methods": lambda w: w in METHODS or w in NOT_DP_METHODS}
    )
    config = load_config(args.configfile) if args.configfile else None
    statement = build_bundle(args.results_dir, args.out_dir, include_nonprivate=args.include_nonprivate,
                             methods=args.methods, config=config)
    missing = unbundled(statement, config) if config is not None else []
    if missing:
        print(f"warning: {len(missing)} release(s) the config's study implies are not in {args.results_dir} (a job not run "
              f"or failed), so not in the bundle: {', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}; "
              "`dphpo verify --release --configfile` will fail it until the tree is complete", file=sys.stderr)
    for d in statement["datasets"]:
        c = d["composed"]
        print(f"{d['dataset']}: {len(d['releases'])} DP release(s), all together ({c['eps']:.4g}, {c['delta']:.3g})-DP"
              + (f"; {len(d['nonprivate'])} non-private (ε = ∞): the whole bundle costs ε = ∞" if d["nonprivate"] else ""))
        if cap_dominates(c):
            print(f"warning: {d['dataset']}: δ = {c['delta']:.3g} is mostly (1 + e^ε)·P[some capped K exceeded its cap] = "
                  f"{c['truncation_delta']:.3g}, paid at the bundle's ε: rerun the Papernot–Steinke and Koskela jobs with "
                  "baselines.<method>.max_trials: auto (the default), or publish fewer releases", file=sys.stderr)
    print(f"bundle written to {args.out_dir}: publish it whole; PRIVACY.md states what it costs; "
          f"check it with `dphpo verify --release {args.out_dir}`")
    return 0


def add_release_parser(subparsers: Any) -> argparse.ArgumentParser:
    text = (
        "Copy what may be published out of a results tree: the DP releases (result.json) and their models, "
        "tables, figures and an HTML report rebuilt from them, PRIVACY.md (per private dataset: privacy unit, "
        "adjacency, delta, what is public, each release's (eps, delta) and all of them composed) and a MANIFEST "
        "of sha256 sums. Internal logs, stage files, logs, benchmarks, features and keys never go in; the "
        "non-private reference and test-selected oracles only with --include-nonprivate (stated as eps = inf)."
    )
    p = subparsers.add_parser("release", help="build a publishable bundle from a results tree", description=text)
    # nargs "?": words after --configfile or --methods are taken back as these where they are missing
    # (_take_back_positionals)
    p.add_argument("results_dir", nargs="?", metavar="RESULTS_DIR", help="the results tree (e.g. results/)")
    p.add_argument("out_dir", nargs="?", metavar="OUT_DIR", help="a new folder for the bundle")
    p.add_argument("--configfile", nargs="+", metavar="FILE", help="the workflow config file(s) (their design_notes label rows chosen on private data)")
    p.add_argument("--include-nonprivate", action="store_true", help="also the non-private reference and oracles (eps = inf)")
    p.add_argument("--methods", nargs="+", metavar="METHOD", help="only these methods' releases")
    p.set_defaults(handler=_release, parser=p)
    return p


def add_verify_parser(subparsers: Any) -> argparse.ArgumentParser:
    text = (
        "Check a published results tree from its files alone (never trains, needs no key): every release's "
        "seal, its total eps recomputed from its ledger by independent code (GDP closed form; dp_accounting "
        "RDP and PLD), its target, that it holds no field the guarantee does not cover, and with --configfile "
        "that its config hash is the one that config asks for. Exit 0: everything holds; 1: something fails; "
        "2: bad arguments."
    )
    p = subparsers.add_parser("verify", help="verify a published results tree", description=text)
    p.add_argument("results_dir", nargs="?", metavar="RESULTS_DIR", help="the results tree (e.g. results/)")
    p.add_argument("--configfile", nargs="+", metavar="FILE",
                   help="the config file(s) the results claim to come from, as given to snakemake --configfile: "
                   "each release's config hash, and every release the config's study implies present, no other")
    p.add_argument("--release", action="store_true", help="RESULTS_DIR is a bundle of `dphpo release`: check that "
                   "it holds nothing that must not be published, its MANIFEST and its privacy statement")
    p.set_defaults(handler=_verify, parser=p)
    return p


def _check_config(args: argparse.Namespace) -> int:
    from dphpo.data.files import file_section
    from dphpo.init_study import inspect_data
    from dphpo.privacy.randomness import check_key_config
    from dphpo.studies import config as study_config
    from dphpo.studies.validate import load_config

    config = load_config(args.configfile)  # ConfigError naming file and line, or the key: exit 2
    check_key_config(config)  # a configured key file that is missing or exposed fails the first job otherwise
    data = []
    for name in sorted({study["dataset"] for study in config["studies"]}):
        section = file_section(config, name)
        if section is not None:  # the user's files, read whole as the feature job will: labels, classes, images
            found = inspect_data(name, section)
            data.append(f"datasets.{name}: {found.source}: {found.n_train:,} train / {found.n_test:,} test records, "
                        f"{len(found.classes)} classes, every file readable")
    files = math.prod(study_config.result_file_count(config))
    language = len(study_config.language_studies(config))
    heads = [f"{study['dataset']} x {study['extractor']}" for study in config["studies"]]
    # "valid" only once everything the workflow checks before its first job has passed
    print(f"{' '.join(args.configfile)}: valid ({len(heads)} linear-head stud{'y' if len(heads) == 1 else 'ies'} on "
          f"frozen features: {', '.join(heads)}{f'; {language} language' if language else ''}; "
          f"{files:,} linear-head result files)")
    print("\n".join([*data, "run it: snakemake --cores all --configfile " + " ".join(args.configfile)]))
    return 0


#: Measured GPU throughput of the batched trainer, fp32, CIFAR-10 x ViT-B shapes, 64 trials (issue 31: one H100,
#: 21.4 TFLOP/s; one H200 with the noise drawn ahead, 29.5 TFLOP/s, benchmarks/README.md), for
#: `plan-cost --device cuda` on a machine without the GPU.
GPU_GFLOPS = {"h100": 21_400.0, "h200": 29_500.0}


#: The first words of every file `plan-cost --runtimes` writes: only such a file is ever replaced.
RUNTIMES_HEADER = "# Runtime limits (minutes) from dphpo plan-cost"


def _check_runtimes_path(path: str, configfiles: list[str]) -> None:
    """Refuse, before any work, a --runtimes path that would replace a file plan-cost did not write (a
    --configfile above all) or that cannot be written."""
    target = Path(path)
    if any(target.resolve() == Path(c).resolve() for c in configfiles):
        raise ConfigError(f"--runtimes: {path} is a --configfile; write the limits to a file of their own")
    if target.is_dir():
        raise ConfigError(f"--runtimes: {path} is a folder; expected a file name such as runtimes.yaml")
    if target.exists():
        try:
            first = target.read_text(errors="replace").split("\n", 1)[0]
        except OSError as err:
            raise ConfigError(f"--runtimes: cannot read the existing {path} ({err.strerror or err})") from None
        if not first.startswith(RUNTIMES_HEADER):
            raise ConfigError(f"--runtimes: {path} exists and was not written by plan-cost; remove it or name another file")
    check_writable(target, "--runtimes")


def _plan_cost(args: argparse.Namespace) -> int:
    from dphpo.studies import cost, extraction_cost, language_cost
    from dphpo.studies.validate import load_config

    config = load_config(args.configfile)
    if args.runtimes:
        _check_runtimes_path(args.runtimes, args.configfile)
    if args.gflops:
        gflops, source = args.gflops, "given (--gflops)"
    elif args.device == "cuda":
        gflops, source = GPU_GFLOPS[args.gpu], f"measured on one {args.gpu.upper()} (issue 31, fp32, 64 trials)"
    else:
        gflops, source = cost.measure_gflops(), "measured here now (the batched trainer on synthetic features)"
    if args.lm_tflops:
        lm_tflops, lm_source = args.lm_tflops, "given (--lm-tflops)"
    else:
        where = args.gpu if args.device == "cuda" else "cpu"
        lm_tflops = language_cost.LM_TFLOPS[where]
        lm_source = f"GPT-2 DP fine-tuning measured on {'one ' + where.upper() if where != 'cpu' else 'a 2-core VM'} (benchmarks/README.md)"
    extractions = extraction_cost.extraction_jobs(config)
    if args.extract_gflops:
        extract_gflops, extract_source = args.extract_gflops, "given (--extract-gflops)"
    elif args.device == "cuda":
        extract_gflops, extract_source = extraction_cost.EXTRACT_GFLOPS[args.gpu], f"EfficientNet-Lite0 on one {args.gpu.upper()}"
    elif any(flop for *_, flop in extractions):
        extract_gflops, extract_source = extraction_cost.measure_extract_gflops(), "EfficientNet-Lite0 measured here now"
    else:
        extract_gflops, extract_source = None, "nothing to extract but raw inputs"
    rules = (extraction_cost.extraction_costs(extractions, extract_gflops, args.overhead)
             + cost.plan_cost(config, gflops, overhead_s=args.overhead) + language_cost.language_costs(config, lm_tflops, args.overhead))
    total = sum(r.seconds or 0 for r in rules)
    if args.runtimes:
        limits = cost.runtime_limits(rules)
        header = (f"{RUNTIMES_HEADER} at {gflops:,.0f} GFLOP/s ({source}): {cost.RUNTIME_SAFETY:g}x each\n"
                  f"# rule's slowest job, at least {cost.RUNTIME_FLOOR_MIN}; the language rules (one rule for every study) per study\n"
                  f"# (by_study: that study's slowest job; the rule's runtime, the slowest study's, for any other).\n"
                  f"# Use: snakemake --configfile {' '.join(args.configfile)} {args.runtimes}\n")
        write_text(args.runtimes, header + yaml.safe_dump({"resources": limits}, sort_keys=True))
        # on stderr: --json's stdout is the JSON object alone
        print(f"wrote {args.runtimes}: runtime limits for {', '.join(sorted(limits)) or 'no rule'}", file=sys.stderr)
        for where, minutes in cost.long_limits(limits):  # a limit past a cluster's MaxTime pends or is refused
            print(f"warning: {where} = {minutes:,} min ({minutes / 1440:.1f} days) is past most clusters' MaxTime "
                  f"({cost.LONG_LIMIT_MIN // 1440} days): check your partition's (`scontrol show partition`) before "
                  "you submit; a job past it pends or is refused", file=sys.stderr)
    if args.json:
        print(json.dumps({"gflops": gflops, "source": source, "lm_tflops": lm_tflops, "lm_source": lm_source,
                          "extract_gflops": extract_gflops, "extract_source": extract_source, "overhead_s": args.overhead, "total_seconds": total, "rules": [vars(r) for r in rules]}, indent=2))
        return 0
    extracting = f"{extract_gflops:,.0f} GFLOP/s" if extract_gflops else "-"
    print(f"throughput {gflops:,.0f} GFLOP/s ({source}); language rules at {lm_tflops:g} TFLOP/s ({lm_source}); "
          f"extraction at {extracting} ({extract_source}); {args.overhead:g} s start-up per job")
    print(f"{'rule':<34} {'jobs':>5} {'trial-steps':>12} {'examples':>14} {'TFLOP':>12} {'est. time':>10}")
    for r in rules:
        when = "-" if r.seconds is None else f"{r.seconds / 60:.1f} min"
        examples = f"{r.examples:,.0f}" if r.examples else "-"
        print(f"{r.rule:<34} {r.jobs:>5} {r.trial_steps:>12,.0f} {examples:>14} {r.flop / 1e12:>12,.1f} {when:>10}" + (f"  ({r.note})" if r.note else ""))
    print(f"{'total (one job at a time)':<34} {sum(r.jobs for r in rules):>5} {sum(r.trial_steps for r in rules):>12,.0f} "
          f"{sum(r.examples for r in rules):>14,.0f} {sum(r.flop for r in rules) / 1e12:>12,.1f} {total / 60:>6.1f} min")
    print("examples: the inputs an extraction encodes, the examples a language rule trains on; not counted: the CNN "
          "baseline's training, the language caches, pretraining and evaluation passes")
    return 0


def _init(args: argparse.Namespace) -> int:
    from dphpo.init_study import init_study

    kind, path = next((k, p) for k, p in (("image_folder", args.images), ("text_table", args.texts), ("features", args.features)) if p)
    out, found, command, notes = init_study(kind, path, args.name, args.out, add=args.add, text_field=args.text_field,
                                            label_field=args.label_field, split_field=args.split_field,
                                            public_n_train=args.public_n_train, public_test=args.public_test)
    print(f"{found.name}: {found.source}; {found.n_train:,} train / {found.n_test:,} test records, "
          f"{len(found.classes)} classes ({', '.join(found.classes[:8])}{', ...' if len(found.classes) > 8 else ''})")
    print(f"{'added to' if args.add else 'wrote'} {out}: read its header (what the guarantee assumes), then run it:")
    print(f"  {command}")
    for note in notes:
        print(note)
    return 0


def add_init_parser(subparsers: Any) -> argparse.ArgumentParser:
    text = (
        "Write a runnable config for a study of your own data: reads the data as the workflow will (same checks, "
        "same errors), picks the extractor for its kind (EfficientNet-Lite0 for images, MiniLM for texts, the "
        "features themselves), takes the embedded study's methods with the safeguarded rule beside the paper's, "
        "states test_split: public and your declared public_n_train in a commented header, validates it, and "
        "prints the one command that runs it. Layouts: images DIR/train/<class>/* (DIR/test/<class>/* "
        "optional); a CSV/TSV/JSONL/Parquet table with a text and a label column; an .npz with train_x, "
        "train_y, test_x, test_y (config/README.md, 'Your own data')."
    )
    p = subparsers.add_parser("init", help="write a config for a study of your own data", description=text)
    data = p.add_mutually_exclusive_group(required=True)
    data.add_argument("--images", metavar="DIR", help="an image folder: DIR/train/<class>/<image>")
    data.add_argument("--texts", metavar="FILE", help="a text table (.csv, .tsv, .jsonl, .parquet)")
    data.add_argument("--features", metavar="FILE", help="an .npz of precomputed features")
    p.add_argument("--name", help="the dataset's name in the config (default: from the file or folder name)")
    p.add_argument("--out", metavar="FILE", help="the config to write (default: config/<name>.yaml)")
    p.add_argument("--add", action="store_true", help="add the dataset to the existing --out config "
                   "(rewritten as plain YAML: its comments are not kept)")
    p.add_argument("--text-field", help="texts: the text column (default: the first of text, sentence, content, ...)")
    p.add_argument("--label-field", help="texts: the label column (default: the first of label, class, target, ...)")
    p.add_argument("--split-field", help="texts: the column that says train or test for each row (default: a column "
                   "named split; else a per-record split)")
    p.add_argument("--public-n-train", type=int, metavar="N", help="required: the training-set size the releases state "
                   "(DP-GD divides by it, delta is set from it); the count of your files is private, so declare a public "
                   "number (init names the count it found when this is missing)")
    p.add_argument("--public-test", action="store_true", help="declare public a test split carved out of your "
                   "training records (needed only where the data have no test split of their own)")
    p.set_defaults(handler=_init)
    return p


def add_check_config_parser(subparsers: Any) -> argparse.ArgumentParser:
    text = (
        "Read config file(s) as `snakemake --configfile A B` does (later files override earlier keys) and check "
        "them as the workflow does before any job, without creating the noise key. Names the file and line of a "
        "YAML syntax error or a key written twice, where Snakemake itself says only that the file is not valid "
        "JSON or YAML. Exit 0: valid; 2: it names what is wrong."
    )
    p = subparsers.add_parser("check-config", help="check workflow config file(s), naming file and line", description=text)
    p.add_argument("configfile", nargs="+", metavar="FILE", help="the config file(s), in snakemake's order")
    p.set_defaults(handler=_check_config)
    return p


def add_plan_cost_parser(subparsers: Any) -> argparse.ArgumentParser:
    text = ("What the study target of a config costs before it runs: per rule, its jobs, the trial-steps they train in "
            "expectation and their FLOP (4 N d K per trial-step), and the time at a throughput measured here (a few "
            "seconds), given, or measured on a named GPU; the language rules by the examples they process (6 P L FLOP "
            "each) at a measured DP fine-tuning rate.")
    p = subparsers.add_parser("plan-cost", help="the study target's cost per rule, before it runs", description=text)
    p.add_argument("--configfile", nargs="+", required=True, metavar="FILE", help="the config file(s), in snakemake's order")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="cpu: measure here; cuda: a named GPU's throughput")
    p.add_argument("--gpu", choices=sorted(GPU_GFLOPS), default="h100", help="the GPU of --device cuda")
    p.add_argument("--gflops", type=positive_float, default=None, help="the trainer's throughput in GFLOP/s (instead of measuring)")
    p.add_argument("--lm-tflops", type=positive_float, default=None, help="DP fine-tuning's effective TFLOP/s for the language "
                   "rules (6 P L per example; default: measured, studies.language_cost.LM_TFLOPS)")
    p.add_argument("--extract-gflops", type=positive_float, default=None, help="feature extraction's throughput in "
                   "GFLOP/s (default: EfficientNet-Lite0 measured here, or the --gpu's; studies.extraction_cost)")
    p.add_argument("--overhead", type=nonnegative_float, default=15.0, help="seconds of start-up per job (imports, the cache)")
    p.add_argument("--json", action="store_true", help="print one JSON object with every field")
    p.add_argument("--runtimes", metavar="FILE", help="also write a config file of each rule's runtime limit from the "
                   "estimate (resources.<rule>.runtime; the language rules also per study, resources.<rule>.by_study), "
                   "to pass after the config: a SLURM job neither killed at its limit nor asking for hours it does not need")
    p.set_defaults(handler=_plan_cost)
    return p


def add_diff_parser(subparsers: Any) -> argparse.ArgumentParser:
    from dphpo import treediff

    p = subparsers.add_parser("diff", help="compare two results trees", description=treediff.DESCRIPTION)
    treediff.add_arguments(p).set_defaults(handler=treediff.run)
    return p


#: builders of the top-level subcommands (each: subparsers -> its parser, with `handler` set)
SUBCOMMAND_BUILDERS: list[Callable[[Any], argparse.ArgumentParser]] = [
    add_privacy_parser, add_audit_parser, add_verify_parser, add_release_parser, add_diff_parser, add_check_config_parser,
    add_plan_cost_parser,
    add_init_parser,
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dphpo", description="Differentially private hyperparameter optimization.")
    from dphpo import __version__

    parser.add_argument("--version", action="version", version=f"dphpo {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for builder in SUBCOMMAND_BUILDERS:
        builder(subparsers)
    parser.set_defaults(handler=lambda args: _missing(parser))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run `dphpo` with `argv` (default: sys.argv[1:]); returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        return int(args.handler(args))
    except SystemExit as exit_:  # argparse errors (code 2), --help / --version (code 0)
        code = exit_.code
        return code if isinstance(code, int) else (0 if code is None else 2)
    except (ValueError, DPHPOError) as err:
        return _fail("dphpo", str(err))
    except BrokenPipeError:  # the output piped into a reader that stopped early (`| head`): not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python's flush at exit must not raise again
        return 0


if __name__ == "__main__":
    sys.exit(main())
