"""Fixtures of the contract suite.

``claim_path`` runs a test twice: once through the claim this database uses natively
(UPDATE ... RETURNING, or SKIP LOCKED on MariaDB 10.6+), once through the portable path
that servers without SKIP LOCKED take, forced on whatever server runs the suite."""
from __future__ import annotations

import pytest

from tests.contract import procs


@pytest.fixture(params=["native", "portable"])
def claim_path(request, monkeypatch) -> str:
    # The environment variable carries the choice into spawned child processes.
    monkeypatch.setenv(procs.CLAIM_PATH_VARIABLE, request.param)
    procs.apply_claim_path(monkeypatch.setattr)
    return request.param
