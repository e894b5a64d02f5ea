// Command etcd is the etcd server built from go.etcd.io/etcd/server/v3 at the
// version k8s.io/kubernetes pins, with etcd's own command line (etcdmain), so
// it takes the same flags as an etcd release binary.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
