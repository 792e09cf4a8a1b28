"""Identity rules: which labels name the node, GPU and job, which form the metric key."""

from __future__ import annotations

import pytest

from trainguard.errors import ConfigError
from trainguard.telemetry import Entity, IdentityConfig, identify, render_key, strip_port


@pytest.mark.parametrize(("instance", "node"), [
    ("host-1:9100", "host-1"),
    ("10.0.0.7:9400", "10.0.0.7"),
    ("[::1]:9100", "::1"),
    ("[fe80::1%eth0]:9100", "fe80::1%eth0"),
    ("fe80::1", "fe80::1"),
    ("plainhost", "plainhost"),
])
def test_strip_port(instance: str, node: str) -> None:
    assert strip_port(instance) == node
    assert identify("up", {"instance": instance}).entity == Entity(node)


def test_dcgm_labels() -> None:
    labels = {"gpu": "3", "UUID": "GPU-x", "device": "nvidia3", "pci_bus_id": "0:1",
              "modelName": "NVIDIA H100", "Hostname": "n7", "DCGM_FI_DRIVER_VERSION": "535",
              "hpc_job": "1234", "instance": "10.0.0.1:9400", "job": "dcgm"}
    ident = identify("DCGM_FI_DEV_GPU_TEMP", labels)
    assert ident.entity == Entity("n7", "3")  # Hostname beats instance
    assert ident.job == "1234"
    assert ident.dims == ()


def test_first_present_label_wins() -> None:
    assert identify("m", {"node": "a", "hostname": "b"}).entity == Entity("b")
    assert identify("m", {"node": "a", "UUID": "GPU-9"}).entity == Entity("a", "GPU-9")
    assert identify("m", {"node": "a", "jobid": "", "slurm_job_id": "77"}).job == "77"


def test_dimension_labels_stay_sorted_and_escaped() -> None:
    ident = identify("node_network_receive_bytes_total",
                     {"instance": "n1:9100", "device": "eth0", "a": 'x"y', "empty": ""})
    assert render_key("node_network_receive_bytes_total", ident.dims) == (
        'node_network_receive_bytes_total{a="x\\"y",device="eth0"}')
    # device is only dropped when it is an NVIDIA device name
    assert identify("m", {"node": "n", "device": "nvidia12"}).dims == ()


def test_no_node_label() -> None:
    assert identify("m", {"gpu": "0"}).entity is None


def test_custom_config() -> None:
    cfg = IdentityConfig(node_labels=("host",), gpu_labels=("card",), job_labels=("run",),
                         ignore_labels=("rack",), ignore_values=())
    ident = identify("m", {"host": "h", "card": "1", "run": "r", "rack": "r1",
                           "device": "nvidia0", "Hostname": "other"}, cfg)
    assert (ident.entity, ident.job) == (Entity("h", "1"), "r")
    assert ident.dims == (("Hostname", "other"), ("device", "nvidia0"))


@pytest.mark.parametrize("kwargs", [{"node_labels": ()}, {"gpu_labels": "gpu"},
                                    {"job_labels": ("",)},
                                    {"ignore_values": (("device", "("),)}])
def test_bad_config(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigError, match=r"telemetry\.identity"):
        IdentityConfig(**kwargs)  # type: ignore[arg-type]


def test_render_key() -> None:
    assert render_key("x", ()) == "x"
    assert render_key("x", (("a", "1"), ("b", "\n"))) == 'x{a="1",b="\\n"}'
