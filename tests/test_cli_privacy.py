"""`dphpo privacy ...`: the calculators print the library's numbers; bad input exits 2 naming the flag."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from dphpo.cli import main
from dphpo.privacy.gdp import eps_from_mu, mu_from_eps, sigma_for_steps
from dphpo.privacy.ledger import plan_stages
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
    assert len(data["ledger"]["entries"]) == 6


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
