"""`dphpo privacy ...`: the calculators print the library's numbers; bad input exits 2 naming the flag."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from dphpo.cli import main
from dphpo.privacy.gdp import eps_from_mu, mu_from_eps, sigma_for_steps
from dphpo.privacy.planning import plan_stages
from dphpo.privacy.tuning import calibrate_ps_mu, ps_tuned_eps


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def last_number(out: str) -> float:
    return float(out.strip().splitlines()[-1])


def test_eps(capsys):
    code, out, _ = run(capsys, "privacy", "eps", "--mu", "1.0", "--delta", "1e-5")
    assert code == 0
    assert last_number(out) == pytest.approx(eps_from_mu(1.0, 1e-5), rel=1e-9)


def test_mu(capsys):
    code, out, _ = run(capsys, "privacy", "mu", "--eps", "0.5", "--delta", "1e-6")
    assert code == 0
    assert last_number(out) == pytest.approx(mu_from_eps(0.5, 1e-6), rel=1e-9)


def test_sigma(capsys):
    code, out, _ = run(capsys, "privacy", "sigma", "--eps", "1", "--delta", "1e-5", "--steps", "100")
    assert code == 0
    assert last_number(out) == pytest.approx(sigma_for_steps(1.0, 1e-5, 100), rel=1e-9)


def test_plan_prints_final_eps(capsys):
    code, out, _ = run(
        capsys, "privacy", "plan", "--total-eps", "1", "--delta", "1e-5", "--n", "3", "--eps1", "0.1", "--eps2", "0.2"
    )
    assert code == 0
    expected = plan_stages(1.0, 1e-5, n_trials=3, stage_eps=[0.1, 0.2])["final_eps"]
    assert last_number(out) == pytest.approx(expected, rel=1e-9)


def test_plan_with_selection_json(capsys):
    code, out, _ = run(
        capsys,
        "privacy",
        "plan",
        "--total-eps",
        "2",
        "--delta",
        "1e-5",
        "--n",
        "4",
        "--stage-eps",
        "0.05",
        "0.1",
        "0.2",
        "--selection-mu",
        "0.05",
        "--json",
    )
    assert code == 0
    data = json.loads(out)
    expected = plan_stages(2.0, 1e-5, n_trials=4, stage_eps=[0.05, 0.1, 0.2], selection_mu=0.05)
    assert data["final_eps"] == pytest.approx(expected["final_eps"], rel=1e-9)
    assert data["final_mu"] == pytest.approx(expected["final_mu"], rel=1e-9)
    assert data["total_eps"] == pytest.approx(2.0, rel=1e-9)
    # the ledger holds every planned release, the final run last: its total is the plan's total
    assert len(data["ledger"]["entries"]) == 7 and data["ledger"]["entries"][-1]["what"] == "final run"
    assert data["ledger"]["total"]["eps"] == data["total_eps"]


def test_plan_total_never_exceeds_the_target(capsys):
    """Pure GDP: the final μ is shaved like every planned budget, so rounding never lands above 8."""
    code, out, _ = run(
        capsys, "privacy", "plan", "--total-eps", "8", "--delta", "1e-5", "--n", "5", "--eps1", "0.1", "--eps2", "0.2",
        "--json",
    )
    assert code == 0
    data = json.loads(out)
    assert 8.0 - 1e-6 < data["total_eps"] <= 8.0


def test_plan_infeasible_exits_2_with_one_line(capsys):
    code, out, err = run(
        capsys,
        "privacy",
        "plan",
        "--total-eps",
        "0.3",
        "--delta",
        "1e-5",
        "--n",
        "3",
        "--eps1",
        "0.1",
        "--eps2",
        "0.2",
        "--selection-mu",
        "0.1",
    )
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1
    assert "infeasible" in lines[0] and "stage 2 trials" in lines[0]


@pytest.mark.parametrize(
    "distribution,eta", [("logarithmic", None), ("geometric", None), ("tnb", "0.5"), ("poisson", None)]
)
def test_select(capsys, distribution, eta):
    argv = [
        "privacy",
        "select",
        "--mu-trial",
        "0.3",
        "--mean-trials",
        "10",
        "--distribution",
        distribution,
        "--delta",
        "1e-5",
    ]
    if eta is not None:
        argv += ["--eta", eta]
    code, out, _ = run(capsys, *argv)
    assert code == 0
    expected = ps_tuned_eps(0.3, distribution, 10.0, None if eta is None else float(eta), 1e-5)
    assert last_number(out) == pytest.approx(expected, rel=1e-9)


def test_select_json_and_select_mu(capsys):
    code, out, _ = run(
        capsys,
        "privacy",
        "select",
        "--mu-trial",
        "0.3",
        "--mean-trials",
        "10",
        "--distribution",
        "geometric",
        "--delta",
        "1e-5",
        "--json",
    )
    assert code == 0
    data = json.loads(out)
    assert data["eta"] == 1.0 and data["eps"] == pytest.approx(ps_tuned_eps(0.3, "geometric", 10.0, None, 1e-5))
    code, out, _ = run(
        capsys,
        "privacy",
        "select-mu",
        "--eps",
        "1",
        "--mean-trials",
        "10",
        "--distribution",
        "poisson",
        "--delta",
        "1e-5",
    )
    assert code == 0
    assert last_number(out) == pytest.approx(calibrate_ps_mu(1.0, 1e-5, "poisson", 10.0), rel=1e-9)


def test_prv_eps(capsys):
    from dphpo.privacy.prv import prv_eps_subsampled_gaussian

    code, out, _ = run(capsys, "privacy", "prv-eps", "--q", "1", "--sigma", "10", "--steps", "20", "--delta", "1e-5")
    assert code == 0
    assert last_number(out) == pytest.approx(prv_eps_subsampled_gaussian(1.0, 10.0, 20, 1e-5), rel=1e-9)


@pytest.mark.parametrize(
    "argv,flag",
    [
        (["privacy", "eps", "--mu", "-1", "--delta", "1e-5"], "--mu"),
        (["privacy", "eps", "--mu", "1", "--delta", "2"], "--delta"),
        (["privacy", "eps", "--mu", "abc", "--delta", "1e-5"], "--mu"),
        (["privacy", "eps", "--delta", "1e-5"], "--mu"),
        (["privacy", "sigma", "--eps", "1", "--delta", "1e-5", "--steps", "0"], "--steps"),
        (["privacy", "plan", "--total-eps", "1", "--delta", "1e-5", "--n", "3", "--eps1", "0.1"], "--eps2"),
        (
            ["privacy", "plan", "--total-eps", "1", "--delta", "1e-5", "--n", "0", "--eps1", "0.1", "--eps2", "0.2"],
            "--n",
        ),
        (
            [
                "privacy",
                "select",
                "--mu-trial",
                "0.3",
                "--mean-trials",
                "10",
                "--distribution",
                "tnb",
                "--delta",
                "1e-5",
            ],
            "--eta",
        ),
        (
            [
                "privacy",
                "select",
                "--mu-trial",
                "0.3",
                "--mean-trials",
                "10",
                "--distribution",
                "geometric",
                "--eta",
                "2",
                "--delta",
                "1e-5",
            ],
            "--eta",
        ),
        (
            [
                "privacy",
                "select",
                "--mu-trial",
                "0.3",
                "--mean-trials",
                "0.5",
                "--distribution",
                "geometric",
                "--delta",
                "1e-5",
            ],
            "--mean-trials",
        ),
        (
            [
                "privacy",
                "select",
                "--mu-trial",
                "0.3",
                "--mean-trials",
                "10",
                "--distribution",
                "uniform",
                "--delta",
                "1e-5",
            ],
            "--distribution",
        ),
    ],
)
def test_bad_input_exits_2_naming_the_flag(capsys, argv, flag):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert flag in err


def test_json_fields_have_one_shape(capsys):
    """`accountant` is a dict with name and formula in every calculator; select-mu states its η;
    --poisson-delta is recorded (and accepted) for a Poisson number of trials only."""
    calls = {
        "eps": ["--mu", "1", "--delta", "1e-5"],
        "mu": ["--eps", "1", "--delta", "1e-5"],
        "run-eps": ["--sigma", "1", "--steps", "10", "--delta", "1e-5"],
        "select": ["--mu-trial", "0.3", "--mean-trials", "10", "--distribution", "geometric", "--delta", "1e-5"],
        "select-mu": ["--eps", "1", "--mean-trials", "10", "--distribution", "geometric", "--delta", "1e-5"],
        "prv-eps": ["--q", "1", "--sigma", "10", "--steps", "20", "--delta", "1e-5"],
    }
    for command, argv in calls.items():
        code, out, _ = run(capsys, "privacy", command, *argv, "--json")
        assert code == 0, command
        data = json.loads(out)
        assert {"name", "formula"} <= set(data["accountant"]), command
        if command.startswith("select"):
            assert data["eta"] == 1.0 and "poisson_delta" not in data, command
    code, out, _ = run(capsys, "privacy", "select-mu", *calls["select-mu"][:5], "poisson", "--delta", "1e-5", "--json")
    assert json.loads(out)["poisson_delta"] == "gdp"
    code, _, err = run(capsys, "privacy", "select", *calls["select"], "--poisson-delta", "rdp")
    assert code == 2 and "--poisson-delta" in err and "poisson" in err


def test_gdp_with_subsampling_says_it_is_accounted_by_rdp(capsys):
    code, out, err = run(
        capsys, "privacy", "run-eps", "--sigma", "1", "--steps", "10", "--delta", "1e-5", "--sample-rate", "0.1"
    )
    assert code == 0 and "rdp" in out and "note:" in err and "rdp" in err


@pytest.mark.parametrize(
    "argv,flags",
    [
        # μ = √T/σ beyond any ε the GDP closed form computes
        (["run-eps", "--sigma", "1e-300", "--steps", "10", "--delta", "1e-5"], ["--sigma 1e-300", "--steps 10"]),
        # prv-accountant's grid cannot resolve such a δ
        (["prv-eps", "--q", "0.01", "--sigma", "1", "--steps", "10", "--delta", "1e-300"], ["--delta 1e-300"]),
        # prv-accountant cannot place δ this close to 1 on its grid
        (["prv-eps", "--q", "0.01", "--sigma", "1", "--steps", "10", "--delta", "0.999"], ["--delta 0.999"]),
        # η this close to −1 keeps E[K] near 1: 10 is out of reach
        (
            ["select", "--mu-trial", "1", "--mean-trials", "10", "--distribution", "tnb", "--eta", "-0.99999999",
             "--delta", "1e-5"],
            ["--eta -0.99999999", "--mean-trials 10"],
        ),
    ],
)
def test_out_of_range_exits_2_naming_the_flags(capsys, argv, flags):
    code, out, err = run(capsys, "privacy", *argv)
    assert code == 2 and out == "" and "Traceback" not in err
    assert err.startswith(f"dphpo privacy {argv[0]}: error:") and len(err.strip().splitlines()) == 1
    for flag in flags:
        assert flag in err


def test_prv_eps_is_never_negative(capsys):
    """At a large δ the numerical PRV ε falls below 0; every mechanism is (0, δ)-DP there."""
    code, out, _ = run(capsys, "privacy", "prv-eps", "--q", "0.01", "--sigma", "1", "--steps", "10", "--delta", "0.1",
                       "--json")
    assert code == 0
    data = json.loads(out)
    assert data["eps"] == data["eps_upper"] == 0.0 and data["eps_lower"] == 0.0


def test_prv_eps_notes_an_error_margin_that_dominates(capsys):
    code, out, err = run(
        capsys, "privacy", "prv-eps", "--q", "0.01", "--sigma", "1", "--steps", "10", "--delta", "1e-5",
        "--eps-error", "5",
    )
    assert code == 0 and last_number(out) > 5.0
    assert "note:" in err and "--eps-error" in err


def test_subsampled_rdp_at_huge_sigma_is_zero(capsys):
    code, out, _ = run(
        capsys, "privacy", "run-eps", "--sigma", "1e300", "--steps", "10", "--delta", "1e-5", "--accountant", "rdp",
        "--sample-rate", "0.1",
    )
    assert code == 0 and last_number(out) == 0.0


def test_audit_runs_bounds_come_from_the_audit(capsys):
    from dphpo.audit import MAX_RUNS, MIN_RUNS

    code, _, err = run(capsys, "audit", "--runs", str(MIN_RUNS - 1))
    assert code == 2 and "--runs" in err and f">= {MIN_RUNS}" in err
    assert main(["audit", "--help"]) == 0
    assert f"{MIN_RUNS} to {MAX_RUNS:,}" in " ".join(capsys.readouterr().out.split())


def test_no_subcommand_exits_2(capsys):
    assert run(capsys)[0] == 2
    assert run(capsys, "privacy")[0] == 2


def test_python_dash_m_entry_point():
    proc = subprocess.run(
        [sys.executable, "-m", "dphpo", "privacy", "eps", "--mu", "0.5", "--delta", "1e-6"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert float(proc.stdout.strip().splitlines()[-1]) == pytest.approx(eps_from_mu(0.5, 1e-6), rel=1e-9)
    bad = subprocess.run(
        [sys.executable, "-m", "dphpo", "privacy", "eps", "--mu", "0.5", "--delta", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "--delta" in bad.stderr
    assert math.isfinite(float(proc.stdout.strip().splitlines()[-1]))
