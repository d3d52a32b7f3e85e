// Package kubetest runs a real Kubernetes control plane for tests: etcd and
// kube-apiserver as child processes on free loopback ports, from binaries
// built by `make kube-binaries` (hack/kube-binaries.sh).
//
// # Why a real API server
//
// Server-side apply, field managers, managed fields, dry-run and RBAC are
// implemented by the API server; fake clients do not have them. Starting
// one costs ~4 s and ~330 MB, so a test package shares one server: its
// TestMain calls Main, and every test calls Shared.
//
//	func TestMain(m *testing.M) { kubetest.Main(m) }
//
//	func TestApply(t *testing.T) {
//		srv := kubetest.Shared(t)
//		ns := srv.Namespace(t) // a fresh namespace for this test
//		...
//	}
//
// The shared server has no kube-controller-manager, scheduler or kubelet
// (see Nodes for a real kubelet):
// Pods stay Pending, Deployments never become Available, Jobs never run,
// and a deleted namespace stays Terminating. A test that needs an object's
// status writes it itself through the status subresource.
//
// A test that wants the controllers starts a server of its own with them:
//
//	srv := kubetest.New(t, kubetest.WithControllerManager())
//
// kube-controller-manager then runs every default controller, each as its
// own service account (--use-service-account-credentials), authenticated
// with a token of its own as ControllerManagerUser: service accounts and
// their tokens exist, the garbage collector follows owner references, a
// deleted namespace is emptied and removed, and Jobs, Deployments and
// ReplicaSets create their Pods. The Pods still stay Pending (no scheduler,
// no kubelet): a test that needs one to run plays the kubelet (runs its
// command, writes its status), and the controllers do the rest. Starting
// and stopping with it costs ~0.9 s more CPU (BenchmarkStart: 3.0 against
// 2.2 CPU-seconds) and ~120 MB more memory.
//
// # Nodes
//
// A test that needs pods to really run starts a node for its server:
//
//	srv := kubetest.New(t, kubetest.WithControllerManager())
//	reg := ocitest.Start(t, ocitest.Options{})
//	node := kubetest.NewNode(t, srv, kubetest.NodeOptions{HTTPRegistries: []string{reg.Host}})
//	// pods name node.Name in spec.nodeName: there is no scheduler
//
// StartNode runs containerd and a kubelet from the folder `make kube-node`
// fills (NodeAssets), with runc, a CNI bridge of the node's own and a pause
// image imported, never pulled; it needs root and overlayfs. Images come
// from the test's registry over plain HTTP (Image builds one). Pods reach
// the API server in-cluster (the kubernetes Service's address is forwarded
// to it) and the API server reaches the kubelet (logs) with a client
// certificate of its own; nothing else may talk to the kubelet. Stop
// deletes the node's pods through the kubelet, then stops everything and
// removes what is left: no process, mount, cgroup or interface remains.
// Until `make test` builds the node, a missing one only skips (RequireNode).
//
// # Authentication
//
// The admin user (system:masters) has a static token. WithTokenWebhook
// adds a webhook token authenticator (TokenReview v1, answers not cached)
// for every other token: internal/ekstest uses it to authenticate IAM
// principals by their access entries, as EKS does.
//
// # Binaries
//
// Assets finds the folder holding kube-apiserver and etcd (and
// kube-controller-manager, which WithControllerManager needs):
// NUON_KUBE_ASSETS, then KUBEBUILDER_ASSETS, then the user cache folder
// that `make kube-binaries` fills (~/.cache/nuon/kube/v1.37.1). Without them Shared
// skips the test, unless CI is set or the test runs under make test or make
// bench, where it fails (internal/testenv): CI must never pass by skipping.
//
// Kubectl returns the kubectl built in the same folder from the same
// Kubernetes version, for tests and benchmarks that compare with it; a
// kubectl of another version is reported missing the same way.
//
// # Stopping
//
// Stop terminates kube-controller-manager, then kube-apiserver, and etcd
// only after it: an API server whose etcd vanished first can hang for
// minutes retrying. Each gets
// StopGrace after SIGTERM before SIGKILL.
package kubetest
