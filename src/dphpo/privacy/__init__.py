"""Privacy accounting: GDP closed forms, the ledger of every release, budget plans, RDP (Papernot–Steinke,
Poisson subsampling) and the PRV accountant for minibatch DP-SGD (`dphpo.privacy.prv`, imported on use)."""

from dphpo.privacy.gdp import (
    compose_mu,
    delta_from_mu,
    eps_from_mu,
    mu_from_eps,
    mu_of_steps,
    sigma_for_steps,
)
from dphpo.privacy.ledger import Ledger, LedgerEntry, plan_final_mu, plan_stages
from dphpo.privacy.rdp import (
    calibrate_ps_mu,
    gdp_rdp,
    poisson_subsampled_rdp,
    ps_gdp_rdp,
    ps_ledger_entry,
    ps_rdp,
    ps_tuned_eps,
    rdp_to_delta,
    rdp_to_dp,
    subsampled_gaussian_rdp,
)

__all__ = [
    "Ledger",
    "LedgerEntry",
    "calibrate_ps_mu",
    "compose_mu",
    "delta_from_mu",
    "eps_from_mu",
    "gdp_rdp",
    "mu_from_eps",
    "mu_of_steps",
    "plan_final_mu",
    "plan_stages",
    "poisson_subsampled_rdp",
    "ps_gdp_rdp",
    "ps_ledger_entry",
    "ps_rdp",
    "ps_tuned_eps",
    "rdp_to_delta",
    "rdp_to_dp",
    "sigma_for_steps",
    "subsampled_gaussian_rdp",
]
