"""The one reason a slow-tier test may give up a timing claim: the hypervisor's steal, and nothing else."""

from __future__ import annotations

import pytest

STEAL = "the hypervisor took"  # how the verdict starts a reason that is outside the testbed


def unless_only_steal(reasons: list[str], claim: str) -> None:
    """Runs called unfaithful for the hypervisor's steal alone are outside the testbed: the test says so and
    skips `claim` (every claim before the call held). Any other reason, or none, lets the claim be judged."""
    if reasons and all(r.startswith(STEAL) for r in reasons):
        pytest.skip(f"the hypervisor's steal made the run unfaithful ({reasons[0]}): {claim} not judged; every "
                    "other claim held")
