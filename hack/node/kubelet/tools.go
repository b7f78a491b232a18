//go:build tools

// Package kubeletbuild pins the node commands built by hack/node/build.sh so that
// `go mod tidy` records all their dependencies.
package kubeletbuild

import (
	_ "k8s.io/kubernetes/cmd/kubelet"
)
