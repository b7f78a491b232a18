//go:build tools

// Package k8sbuild pins the Kubernetes control-plane commands built by
// hack/k8s/build.sh so that `go mod tidy` records all their dependencies.
package k8sbuild

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
