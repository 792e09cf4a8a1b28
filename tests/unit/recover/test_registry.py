"""The backend registry: one line per backend drives the CLI's choices and construction, and
the capabilities the supervisor asks for."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trainguard.cli.main import app
from trainguard.errors import ConfigError
from trainguard.recover import registry
from trainguard.recover.backend import Backend, Capabilities, LaunchPlan
from trainguard.recover.local import LocalBackend
from trainguard.recover.registry import (
    BACKENDS,
    BackendEntry,
    BackendOptions,
    backend_names,
    capabilities_of,
    create_backend,
    get_entry,
)


class Undeclared:
    """A backend that does not declare its capabilities."""

    persistent_nodes = True

    def __init__(self, name: str) -> None:
        self.name = name

    def check(self, command: tuple[str, ...], nodes: tuple[str, ...]) -> None: ...

    def capacity(self) -> int | None:
        return None

    def master_addr(self, nodes: tuple[str, ...]) -> str:
        return "127.0.0.1"

    def free_port(self, nodes: tuple[str, ...]) -> int:
        return 1

    def launch(self, plan: LaunchPlan) -> object:
        raise NotImplementedError

    def unavailable(self, nodes: tuple[str, ...]) -> Mapping[str, str]:
        return {}

    def exclude(self, node: str, reason: str) -> None: ...


def test_names_are_unique_and_each_entry_has_help() -> None:
    names = backend_names()
    assert len(set(names)) == len(names) == len(BACKENDS)
    assert all(e.help for e in BACKENDS)


def test_an_unknown_backend_is_one_error_naming_the_choices() -> None:
    with pytest.raises(ConfigError, match=r"unknown backend 'k8s'; choose one of: local, slurm"):
        get_entry("k8s")


def test_the_local_entry_builds_from_the_options() -> None:
    backend = create_backend("local", BackendOptions(options={"slots_per_node": 3}))
    assert isinstance(backend, LocalBackend) and backend.capacity() == 3
    assert capabilities_of(backend) == get_entry("local").capabilities


def test_the_slurm_entry_passes_its_options_through() -> None:
    from trainguard.recover.slurm.backend import SlurmBackend

    backend = create_backend("slurm", BackendOptions("gpt", {"slurm_mode": "submit",
                                                             "partition": "gpu"}))
    assert isinstance(backend, SlurmBackend) and backend.mode == "submit"
    assert capabilities_of(backend) == get_entry("slurm").capabilities
    with pytest.raises(ConfigError, match="unknown slurm mode 'bogus'"):
        create_backend("slurm", BackendOptions(options={"slurm_mode": "bogus"}))


@pytest.mark.parametrize(("options", "message"), [
    ({"slots_per_node": "four"}, "slots_per_node must be an integer"),
    ({"slots_per_node": True}, "slots_per_node must be an integer"),
])
def test_a_mistyped_option_is_a_config_error(options: Mapping[str, object], message: str
                                             ) -> None:
    with pytest.raises(ConfigError, match=message):
        create_backend("local", BackendOptions(options=options))  # type: ignore[arg-type]


def test_capabilities_declared_then_registered_then_default() -> None:
    assert capabilities_of(LocalBackend()) is LocalBackend.capabilities
    slurm_like: Backend = Undeclared("slurm")  # type: ignore[assignment]
    assert capabilities_of(slurm_like) == get_entry("slurm").capabilities
    unknown: Backend = Undeclared("elsewhere")  # type: ignore[assignment]
    assert capabilities_of(unknown) == Capabilities()


def test_agents_declare_that_hosts_read_their_own_kernel_logs() -> None:
    from trainguard.agent.backend import AgentBackend
    from trainguard.agent.launch_local import LocalLauncher

    caps = capabilities_of(AgentBackend(LocalBackend(), LocalLauncher()))
    assert caps.reads_kernel_logs and not caps.has_local_pids and caps.can_signal_rank


def test_slurm_nodes_default_to_the_allocation_minus_the_spares(
        monkeypatch: pytest.MonkeyPatch) -> None:
    default = get_entry("slurm").default_nodes
    assert default is not None and get_entry("local").default_nodes is None
    monkeypatch.setenv("SLURM_JOB_NODELIST", "gpu[01-03]")
    assert default(("gpu02",)) == ("gpu01", "gpu03")
    monkeypatch.delenv("SLURM_JOB_NODELIST")
    with pytest.raises(ConfigError, match="no allocation"):
        default(())


def test_the_cli_builds_a_newly_registered_backend_without_changes(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A new backend is one registry line: `trainguard run --backend` accepts it and hands it
    the options."""
    seen: list[BackendOptions] = []

    def factory(options: BackendOptions) -> Backend:
        seen.append(options)
        raise ConfigError("the k8s backend needs a cluster")

    entry = BackendEntry("k8s", factory, Capabilities(has_local_pids=False), "one pod per node")
    monkeypatch.setattr(registry, "BACKENDS", (*BACKENDS, entry))
    result = CliRunner().invoke(app, [
        "run", "--backend", "k8s", "--nodes", "a,b", "--no-agents", "--no-db",
        "--partition", "p1", "--run-dir", str(tmp_path / "run"), "--", "true"])
    assert result.exit_code == 2
    assert "the k8s backend needs a cluster" in result.output
    assert "Traceback" not in result.output
    (options,) = seen
    assert options.text("partition") == "p1" and options.job_name == "true"


def test_the_cli_refuses_an_unregistered_backend_in_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["run", "--backend", "k8s", "--nodes", "a", "--no-db",
                                      "--run-dir", str(tmp_path / "run"), "--", "true"])
    assert result.exit_code == 2
    assert re.search(r"unknown backend 'k8s'; choose one of: local, slurm", result.output)


def test_the_backend_help_lists_every_entry() -> None:
    text = registry.backends_help()
    assert all(f"{e.name} ({e.help})" in text for e in BACKENDS)
    assert replace(BACKENDS[0], help="x").help == "x"  # entries are plain frozen records
