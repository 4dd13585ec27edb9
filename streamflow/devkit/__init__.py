"""Local development infrastructure: Kafka, a kwok Kubernetes control plane, a KServe server."""

from streamflow.devkit.k8s import KUBE_BINARIES, KubeCluster, find_k8s_bin, find_kubectl
from streamflow.devkit.kafka import (
    DevkitError,
    KafkaBroker,
    create_topic,
    find_java,
    find_kafka_lib,
)
from streamflow.devkit.modelserver import ModelServer, find_modelserver

__all__ = [
    "KUBE_BINARIES",
    "DevkitError",
    "KafkaBroker",
    "KubeCluster",
    "ModelServer",
    "create_topic",
    "find_java",
    "find_k8s_bin",
    "find_kafka_lib",
    "find_kubectl",
    "find_modelserver",
]
