// Command etcd is a thin wrapper around the etcd 3.6 server entry point,
// built by hack/k8s/build.sh (the upstream root module is not go-installable).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
