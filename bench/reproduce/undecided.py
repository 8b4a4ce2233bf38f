"""What deciding the undecided claims would cost.

A claim that reads "cannot tell" at the seeds it has might be decided by
more: if its seed-by-seed mean and spread stayed as measured, its 95 %
interval excludes 0 at the first n where t(0.975, n − 1) · s / √n < |mean|.
That n is a projection, not a promise (the mean and spread of the seeds to
come will differ), and the page says so. An event counted seed by seed is
decided by the sign test at SIGN_TEST_SEEDS seeds, if every seed to come
shows it as all so far did. The cost is the wall time of the runs behind
the claim, one seed each, for the seeds it lacks; claims that rest on the
same runs share them, so the total counts each run once, at the most seeds
any claim asks of it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from scipy import stats

from .claims import ALPHA, SIGN_TEST_SEEDS, Claim, Claims, cannot_tell
from .markdown import table

# Past this many seeds a projection says "more than": nobody runs them.
MOST_SEEDS = 1000


def seeds_to_decide(claim: Claim) -> int | None:
    """The seeds at which `claim` would be decided if its values went on as
    measured; None when no count up to MOST_SEEDS would (a mean of 0, or an
    event its seeds disagree on) or there is no spread to project from."""
    if claim.passed is not None:
        shown = sum(claim.passed)
        agree = shown in (0, claim.n)
        return max(SIGN_TEST_SEEDS, claim.n) if agree and claim.n else None
    found = claim.interval
    if found.mean is None or found.std is None:
        return None
    if found.std == 0:
        return claim.n if found.mean != 0 else None
    for n in range(max(claim.n, 2), MOST_SEEDS + 1):
        if stats.t.ppf(1 - ALPHA / 2, n - 1) * found.std / math.sqrt(n) < abs(
            found.mean
        ):
            return n
    return None


def undecided_lines(claims: Claims) -> list[str]:
    """The page's paragraph and table on the papers' claims that cannot be
    told at their seeds: how many seeds each would need and what they cost."""
    open_claims = [c for c in claims.papers() if c.verdict == cannot_tell(c.n)]
    if not open_claims:
        return []
    rows = []
    extra_by_run: dict[str, tuple[int, float]] = {}
    never = unknown = 0
    for c in open_claims:
        if c.passed is None and c.n < 2:  # one value: no spread to project
            unknown += 1
            rows.append([_label(c), c.n, "— (one seed)", "—"])
            continue
        needed = seeds_to_decide(c)
        if needed is None:
            never += 1
            rows.append([_label(c), c.n, f"over {MOST_SEEDS:,}", "—"])
            continue
        more = needed - c.n
        for run, seconds in c.seed_costs:
            most, _ = extra_by_run.get(run, (0, seconds))
            extra_by_run[run] = (max(most, more), seconds)
        cost = sum(seconds for _, seconds in c.seed_costs)
        rows.append([_label(c), c.n, needed, _hours(more * cost, c.seed_costs)])
    total = math.fsum(more * seconds for more, seconds in extra_by_run.values())
    decidable = len(open_claims) - never - unknown
    verb = "has" if unknown == 1 else "have"
    return [
        f"**Undecided.** {len(open_claims)} of the papers' claims cannot be told"
        " at the seeds they have. The table projects, for each, the seeds at"
        " which its 95 % interval would exclude 0 if the seeds to come kept the"
        " mean and spread measured so far (an event: if every seed to come"
        " showed it as all so far did) — a projection, not a promise — and the"
        " wall time of the runs those seeds add, at the time a seed of them"
        f" took here. Deciding the {decidable} that some count of seeds up to"
        f" {MOST_SEEDS:,} would decide takes about {total / 3600:.1f} hours of"
        " runs, counting once the runs that several claims share;"
        f" {never} would stay undecided at any count up to {MOST_SEEDS:,}"
        + (
            f"; {unknown} {verb} one seed, too few to project from." if unknown else "."
        ),
        "",
        *table(["claim", "seeds", "seeds to decide", "more runs"], rows),
        "",
    ]


def _label(c: Claim) -> str:
    return f"{c.paper}, {c.source}: {c.text}"


def _hours(seconds: float, costs: Sequence[tuple[str, float]]) -> str:
    if not costs:
        return "—"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
