"""The privacy calculators on extreme inputs: exit 2 naming the flag, before any huge allocation."""

import re

import pytest

from dphpo.cli import main
from dphpo.errors import ConfigError
from dphpo.privacy.prv import MAX_GRID_POINTS, compose_prv


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["eps", "--mu", "1e308", "--delta", "1e-5"], "--mu"),
        (["mu", "--eps", "1e8", "--delta", "1e-5"], "--eps"),
        (["plan", "--total-eps", "1", "--delta", "1e-5", "--n", "3", "--eps1", "0.1", "--eps2", "0.2",
          "--selection-mu", "1e300"], "--selection-mu"),
        (["select", "--mu-trial", "1e300", "--mean-trials", "3", "--distribution", "geometric", "--delta", "1e-5"],
         "--mu-trial"),
        (["run-eps", "--sigma", "1e-300", "--steps", "10", "--delta", "1e-5"], "--sigma"),
        # prv-accountant would ask for 26 GiB (σ = 0.05), 2 GiB (T = 10^6) or 6 GiB (calibrating ε = 1000)
        (["prv-eps", "--q", "0.01", "--sigma", "0.05", "--steps", "1000", "--delta", "1e-5"], "--sigma"),
        (["prv-eps", "--q", "0.01", "--sigma", "1", "--steps", "1000000", "--delta", "1e-5"], "--steps"),
        (["sigma", "--eps", "1000", "--steps", "10", "--delta", "1e-5", "--accountant", "prv", "--sample-rate", "0.01"],
         "--eps-error"),
    ],
)
def test_extreme_calculator_input_exits_2_naming_the_flag(argv, flag, capsys):
    assert main(["privacy", *argv]) == 2
    err = capsys.readouterr().err
    assert flag in err and "Traceback" not in err


def test_the_prv_grid_limit_is_checked_before_the_accountant_allocates():
    with pytest.raises(ConfigError, match=re.escape(f"limit {MAX_GRID_POINTS:.0e}")):
        compose_prv(((0.01, 0.05, 1000),), 0.0, 1e-5)


def test_ordinary_prv_questions_stay_within_the_limit(capsys):
    assert main(["privacy", "prv-eps", "--q", "0.01", "--sigma", "1", "--steps", "1000", "--delta", "1e-5"]) == 0
    assert 1.8 < float(capsys.readouterr().out.split()[-1]) < 1.9
