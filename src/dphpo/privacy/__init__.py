"""Privacy as a one-way stack (each module imports only those listed before it):

- math: `gdp` (GDP closed forms), `rdp` (Rényi DP curves), `prv` (prv-accountant, imported on use),
  `calibrate` (σ search);
- `events`: the mechanisms a ledger entry records (Gaussian, Poisson-subsampled Gaussian, RDP curve);
- `composition`: the accountants that read events, one file each, `COMPOSITIONS` their registry;
- `ledger`: every release of a run as an entry (event, count, reason), composed in one place
  (`Ledger.total`, by the first accountant that reads every event), and `plan_final_mu`;
- `planning`: budget plans in μ at δ; `tuning`: Papernot–Steinke tuning (curves, entries, calibration,
  capped K) over the ledger;
- `accountant`: how one training run is recorded and calibrated, and the planning calls the HPO methods
  make; `REGISTRY` holds the values of `privacy.accountant` (`register_accountant` adds one);
- `randomness`: the secret key every private draw comes from.
"""

from dphpo.privacy.gdp import (
    compose_mu,
    delta_from_mu,
    eps_from_mu,
    mu_from_eps,
    mu_of_steps,
    sigma_for_steps,
)
from dphpo.privacy.ledger import Ledger, LedgerEntry, plan_final_mu
from dphpo.privacy.planning import plan_stages
from dphpo.privacy.rdp import (
    gdp_rdp,
    poisson_subsampled_rdp,
    rdp_to_delta,
    rdp_to_dp,
    subsampled_gaussian_rdp,
)
from dphpo.privacy.tuning import calibrate_ps_mu, ps_gdp_rdp, ps_ledger_entry, ps_rdp, ps_tuned_eps

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
