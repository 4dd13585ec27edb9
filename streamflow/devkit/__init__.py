"""Local development infrastructure: Kafka (its pinned jars fetched on first use), kwok
Kubernetes, a real Kubernetes node, KServe, and Toxiproxy for network faults."""

from streamflow.devkit.download import FetchError
from streamflow.devkit.java import java_major, require_java
from streamflow.devkit.k8s import KUBE_BINARIES, KubeCluster, find_k8s_bin, find_kubectl
from streamflow.devkit.k8s_node import PAUSE_IMAGE, TEST_IMAGE, RealNode, find_node_images
from streamflow.devkit.kafka import (
    DevkitError,
    KafkaBroker,
    create_topic,
    find_java,
    find_kafka_lib,
)
from streamflow.devkit.kafka_secured import SecuredKafkaBroker
from streamflow.devkit.modelserver import ModelServer, find_modelserver
from streamflow.devkit.registry import SchemaRegistry, find_registry_app
from streamflow.devkit.toxiproxy import Proxy, Toxic, ToxiproxyServer, find_toxiproxy

__all__ = [
    "KUBE_BINARIES",
    "PAUSE_IMAGE",
    "TEST_IMAGE",
    "DevkitError",
    "FetchError",
    "KafkaBroker",
    "KubeCluster",
    "ModelServer",
    "Proxy",
    "RealNode",
    "SchemaRegistry",
    "SecuredKafkaBroker",
    "Toxic",
    "ToxiproxyServer",
    "create_topic",
    "find_java",
    "find_k8s_bin",
    "find_kafka_lib",
    "find_kubectl",
    "find_modelserver",
    "find_node_images",
    "find_registry_app",
    "find_toxiproxy",
    "java_major",
    "require_java",
]
