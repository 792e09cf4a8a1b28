"""Which label names the node: `--node-label`, and Kubernetes' exporter-pod `Hostname`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from trainguard.errors import ConfigError, TelemetryError
from trainguard.telemetry import (
    Entity,
    IdentityConfig,
    MetricKind,
    TelemetryBuilder,
    identify,
    load_sources,
)

T0 = 1_794_970_800

# dcgm-exporter as a DaemonSet pod: Hostname is the pod, which changes when the pod restarts.
K8S = {"gpu": "0", "UUID": "GPU-a", "Hostname": "dcgm-exporter-x7k2p",
       "k8s_node_name": "gpu-node-07", "namespace": "gpu-operator"}


def test_node_label_overrides_the_built_in_order() -> None:
    assert identify("temp", K8S).entity == Entity("dcgm-exporter-x7k2p", "0")
    cfg = IdentityConfig().for_node_label("k8s_node_name")
    ident = identify("temp", K8S, cfg)
    assert ident.entity == Entity("gpu-node-07", "0")
    assert ident.dims == ()  # the pod's Hostname does not become part of the metric key


def test_a_restarted_exporter_pod_stays_one_node_and_one_series() -> None:
    b = TelemetryBuilder(IdentityConfig().for_node_label("k8s_node_name"))
    for i, pod in enumerate(("dcgm-exporter-x7k2p", "dcgm-exporter-q9w4z")):
        ts = np.array([T0 + 60.0 * i, T0 + 60.0 * i + 30])
        b.add_series("temp", MetricKind.GAUGE, {**K8S, "Hostname": pod}, ts, ts * 0 + 40 + i)
    tel = b.build()
    assert tel.nodes == ("gpu-node-07",)
    (temp,) = tel.metrics
    assert temp.name == "temp"
    assert temp.values.tolist() == [[40.0, 40.0, 41.0, 41.0]]


def test_instance_as_node_label_loses_its_port() -> None:
    cfg = IdentityConfig().for_node_label("instance")
    labels = {"instance": "10.0.3.7:9400", "Hostname": "pod-1", "UUID": "GPU-a"}
    assert identify("m", labels, cfg).entity == Entity("10.0.3.7", "GPU-a")


@pytest.mark.parametrize("label", ["", "  ", "a,", "a b", 'x="y"'])
def test_a_bad_node_label_is_a_config_error(label: str) -> None:
    with pytest.raises(ConfigError, match="--node-label must name a label, got"):
        IdentityConfig().for_node_label(label)


def test_none_or_nothing_keeps_the_built_in_order() -> None:
    cfg = IdentityConfig()
    assert cfg.for_node_label(None) is cfg
    assert cfg.for_node_label([]) is cfg


@pytest.mark.parametrize("given", ["k8s_node_name,instance", ["k8s_node_name", "instance"],
                                   ["k8s_node_name,instance", "k8s_node_name"]])
def test_several_node_labels_are_tried_in_order(given: str | list[str]) -> None:
    cfg = IdentityConfig().for_node_label(given)
    assert cfg.node_labels == ("k8s_node_name", "instance")
    # dcgm-exporter's series carry the node label; node-exporter's only `instance`.
    assert identify("temp", K8S, cfg).entity == Entity("gpu-node-07", "0")
    assert identify("node_load1", {"instance": "gpu-node-07:9100"}, cfg).entity == \
        Entity("gpu-node-07")


@pytest.mark.parametrize(("labels", "node"), [
    # The built-in order: kubernetes_node (Prometheus' usual relabel target) comes first.
    ({"kubernetes_node": "gpu-node-07", "Hostname": "dcgm-exporter-x7k2p"}, "gpu-node-07"),
    # A Hostname equal to the series' pod is the exporter pod: a later candidate names the node.
    ({"Hostname": "dcgm-x", "pod": "dcgm-x", "instance": "gpu-node-07:9400"}, "gpu-node-07"),
    ({"Hostname": "dcgm-x", "pod": "dcgm-x", "node": "gpu-node-07"}, "gpu-node-07"),
    # ... but it is kept when nothing else names the node.
    ({"Hostname": "dcgm-x", "pod": "dcgm-x"}, "dcgm-x"),
    # A workload pod (dcgm-exporter's pod attribution) is not the host: Hostname stays.
    ({"Hostname": "gpu-node-07", "pod": "train-0001-worker-3", "instance": "10.0.0.1:9400"},
     "gpu-node-07"),
])
def test_kubernetes_labels_in_the_built_in_order(labels: dict[str, str], node: str) -> None:
    ident = identify("DCGM_FI_DEV_GPU_TEMP", {**labels, "gpu": "0"})
    assert ident.entity == Entity(node, "0")


def test_a_node_label_no_series_carries_names_the_labels_that_exist(tmp_path: Path) -> None:
    path = tmp_path / "dump.om"
    path.write_text("".join(
        f'temp{{gpu="{g}",Hostname="pod-a",k8s_node_name="n1"}} 40 {T0 + 30 * i}\n'
        for g in range(2) for i in range(3)))
    cfg = IdentityConfig().for_node_label("kubernetes_node")
    with pytest.raises(TelemetryError) as info:
        load_sources([path], identity=cfg)
    msg = str(info.value)
    assert msg.startswith("no series carries the node label kubernetes_node; the 2 series read "
                          "carry: Hostname, gpu, k8s_node_name.")
    assert "--node-label NAME" in msg
    assert "no samples" not in msg


def test_series_lacking_the_chosen_label_are_warned_about_not_fatal() -> None:
    b = TelemetryBuilder(IdentityConfig().for_node_label("k8s_node_name"))
    ts = np.array([T0, T0 + 30.0])
    b.add_series("temp", MetricKind.GAUGE, K8S, ts, ts * 0)
    b.add_series("node_load1", MetricKind.GAUGE, {"instance": "10.0.0.1:9100"}, ts, ts * 0)
    tel = b.build()
    assert tel.nodes == ("gpu-node-07",)
    assert any("node_load1" in w and "k8s_node_name" in w for w in b.last_stats.warnings)


def test_nodes_named_by_their_own_pod_are_warned_about() -> None:
    b = TelemetryBuilder()
    ts = np.array([T0, T0 + 30.0])
    for n in range(4):
        pod = f"dcgm-exporter-{n}"
        b.add_series("temp", MetricKind.GAUGE, {"gpu": "0", "Hostname": pod, "pod": pod}, ts,
                     ts * 0)
    b.add_series("node_load1", MetricKind.GAUGE, {"instance": "gpu-node-07:9100",
                                                  "pod": "node-exporter-1"}, ts, ts * 0)
    b.build()
    (line,) = [w for w in b.last_stats.warnings if "pod" in w]
    assert line.startswith("4 node name(s) equal their series' pod label (dcgm-exporter-0, "
                           "dcgm-exporter-1, dcgm-exporter-2, ...): on Kubernetes")
    assert "--node-label NAME" in line


def test_no_pod_warning_when_the_node_is_named_otherwise() -> None:
    b = TelemetryBuilder()
    ts = np.array([T0, T0 + 30.0])
    b.add_series("temp", MetricKind.GAUGE, {"gpu": "0", "Hostname": "gpu-node-07",
                                            "pod": "train-0001-worker-3"}, ts, ts * 0)
    b.build()
    assert b.last_stats.warnings == ()
