"""Privacy accounting: GDP closed forms, the ledger of every release, budget plans."""

from dphpo.privacy.gdp import (
    compose_mu,
    delta_from_mu,
    eps_from_mu,
    mu_from_eps,
    sigma_for_steps,
)
from dphpo.privacy.ledger import Ledger, LedgerEntry, plan_final_mu

__all__ = [
    "Ledger",
    "LedgerEntry",
    "compose_mu",
    "delta_from_mu",
    "eps_from_mu",
    "mu_from_eps",
    "plan_final_mu",
    "sigma_for_steps",
]
