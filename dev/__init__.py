"""``qosmos dev``: a local Kubernetes cluster without Docker (etcd, kube-apiserver,
kube-controller-manager, the default kube-scheduler, a second kube-scheduler with the
``qosmos-scheduler`` profile calling the extender, KWOK-run fake GPU nodes, the operator).

The integration tests start the same control plane (``qosmos.testing`` re-exports it).
"""
