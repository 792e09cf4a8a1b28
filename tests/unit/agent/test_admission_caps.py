"""One remote address cannot take every pre-authentication place (issue 26, section 5)."""

from __future__ import annotations

import pytest

from trainguard.agent.admission import gate_for


@pytest.mark.parametrize("agents", [0, 8, 100, 1024])
def test_one_remote_address_gets_a_quarter_and_others_still_get_in(agents: int) -> None:
    gate = gate_for(1 << 20, agents)
    taken = sum(gate.admit("203.0.113.7") for _ in range(gate.total))
    assert taken == gate.total // 4
    assert all(gate.admit(f"10.0.{i // 250}.{i % 250}") for i in range(gate.total - taken))


@pytest.mark.parametrize("address", ["127.0.0.1", "127.0.0.2", "::1"])
def test_virtual_nodes_on_loopback_may_all_authenticate_at_once(address: str) -> None:
    gate = gate_for(1 << 20, 1024)
    assert sum(gate.admit(address) for _ in range(2048)) == 2048 == gate.total


def test_an_address_that_is_not_an_ip_counts_as_remote() -> None:
    gate = gate_for(1 << 20, 1024)
    assert gate.cap("?") == gate.per_address < gate.total
