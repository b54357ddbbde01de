"""The accountants that read events: one file per accountant, one registry, the one place a ledger's
total is composed (`compose`).

An accountant here has a narrow interface (`Composition`): its `name`, the event kinds it `reads`
(`dphpo.privacy.events`) and `total(events, delta)`, the (ε, δ) of (event, count) pairs composed.
`compose` gives a list of events to the first accountant in `COMPOSITIONS` that reads every one of
them, so the order is the preference: exact GDP where every release is Gaussian, prv-accountant's
numerical bound where Poisson-subsampled runs join them, Rényi DP (which reads every kind) otherwise.
A new accountant is one file with its class and a line in `COMPOSITIONS` (tests/test_events.py shows
it with a toy accountant); the run accountants that record and calibrate training runs
(`dphpo.privacy.accountant`) sit on top of these.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from dphpo.privacy.composition.gdp import GdpComposition
from dphpo.privacy.composition.prv import PrvComposition
from dphpo.privacy.composition.rdp import RdpComposition
from dphpo.privacy.events import Event


class Composition(Protocol):
    """What a ledger asks of an accountant."""

    name: str
    reads: tuple[type, ...]

    def total(self, events: Sequence[tuple[Event, int]], delta: float, **options: Any) -> dict[str, Any]: ...


#: The accountants, in order of preference (the first that reads every event of a ledger composes it).
COMPOSITIONS: list[Composition] = [GdpComposition(), PrvComposition(), RdpComposition()]


def composition_for(events: Sequence[tuple[Event, int]]) -> Composition:
    """The first accountant of `COMPOSITIONS` that reads every event."""
    kinds = {type(event) for event, _ in events}
    for accountant in COMPOSITIONS:
        if kinds <= set(accountant.reads):
            return accountant
    names = ", ".join(sorted(k.kind for k in kinds))
    raise ValueError(f"no accountant of dphpo.privacy.composition.COMPOSITIONS reads every event kind of this ledger ({names})")


def compose(events: Sequence[tuple[Event, int]], delta: float, **options: Any) -> dict[str, Any]:
    """(ε, δ) of (event, count) pairs composed, by the accountant `composition_for` picks."""
    return composition_for(events).total(events, delta, **options)
