"""The kubelet's PodResources API (v1 List), generated from podresources.proto."""
