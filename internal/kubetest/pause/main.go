// Command pause is the sandbox ("pause") container of kubetest's nodes:
// it holds a pod's namespaces and does nothing until SIGTERM or SIGINT.
// hack/kube-node.sh builds it static into the node's assets folder, and
// StartNode imports it into containerd as PauseImage, so a node never
// pulls registry.k8s.io/pause from the internet.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
}
