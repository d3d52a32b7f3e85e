package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
)

// KubeClient gives the Kubernetes runner a REST client for the cluster's
// API server. The runner builds its requests from absolute paths and
// encodes and decodes JSON itself, so any REST client of the cluster
// will do, whatever its group, version and serializer:
//
//   - NewKubeClient's, which links client-go's REST client and no API
//     group beyond the core and batch types the runner uses: the agent
//     uses it, to stay small;
//   - *kubernetes.Clientset, through the REST client of its discovery
//     client, for callers that already have one.
type KubeClient interface {
	RESTClient() rest.Interface
}

// NewKubeClient returns a KubeClient that talks to the API server of
// cfg.
func NewKubeClient(cfg *rest.Config) (KubeClient, error) {
	c := rest.CopyConfig(cfg)
	c.APIPath = ""
	c.GroupVersion = nil
	c.ContentType = "application/json"
	c.AcceptContentTypes = "application/json"
	// No types: the runner decodes the responses itself.
	c.NegotiatedSerializer = serializer.NewCodecFactory(runtime.NewScheme()).WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	rc, err := rest.UnversionedRESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return restClient{rc}, nil
}

// restClient is the KubeClient of NewKubeClient.
type restClient struct{ c rest.Interface }

var _ KubeClient = restClient{}

func (r restClient) RESTClient() rest.Interface { return r.c }

// API paths of the groups the runner uses.
const (
	coreV1  = "/api/v1"
	batchV1 = "/apis/batch/v1"
)

// kubeAPI is what the runner does in one namespace: the calls of a typed
// clientset it needs, on a plain REST client.
type kubeAPI struct {
	c  rest.Interface
	ns string
}

func (k *Kube) api() kubeAPI {
	return kubeAPI{c: k.Client.RESTClient(), ns: k.Namespace}
}

// fieldManager names the runner in the objects' managed fields.
const fieldManager = "nuon"

func (a kubeAPI) getJob(ctx context.Context, name string) (*batchv1.Job, error) {
	var j batchv1.Job
	err := call(ctx, a.c.Get().AbsPath(batchV1).Namespace(a.ns).Resource("jobs").Name(name), &j)
	if err != nil {
		return nil, err
	}
	return &j, nil
}

func (a kubeAPI) listJobs(ctx context.Context, selector string) (*batchv1.JobList, error) {
	var l batchv1.JobList
	err := call(ctx, a.c.Get().AbsPath(batchV1).Namespace(a.ns).Resource("jobs").Param("labelSelector", selector), &l)
	if err != nil {
		return nil, err
	}
	return &l, nil
}

func (a kubeAPI) createJob(ctx context.Context, j *batchv1.Job) (*batchv1.Job, error) {
	j = j.DeepCopy()
	j.TypeMeta = metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"}
	var out batchv1.Job
	if err := a.send(ctx, a.c.Post().AbsPath(batchV1).Namespace(a.ns).Resource("jobs").Param("fieldManager", fieldManager), j, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// deleteJob deletes the Job named name; its pods go in the background.
func (a kubeAPI) deleteJob(ctx context.Context, name string) error {
	bg := metav1.DeletePropagationBackground
	opts := &metav1.DeleteOptions{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "DeleteOptions"}, PropagationPolicy: &bg}
	return a.send(ctx, a.c.Delete().AbsPath(batchV1).Namespace(a.ns).Resource("jobs").Name(name), opts, nil)
}

func (a kubeAPI) createConfigMap(ctx context.Context, cm *corev1.ConfigMap) error {
	cm = cm.DeepCopy()
	cm.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}
	return a.send(ctx, a.c.Post().AbsPath(coreV1).Namespace(a.ns).Resource("configmaps").Param("fieldManager", fieldManager), cm, nil)
}

func (a kubeAPI) updateConfigMap(ctx context.Context, cm *corev1.ConfigMap) error {
	cm = cm.DeepCopy()
	cm.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}
	return a.send(ctx, a.c.Put().AbsPath(coreV1).Namespace(a.ns).Resource("configmaps").Name(cm.Name).Param("fieldManager", fieldManager), cm, nil)
}

// mergePatchConfigMap applies a JSON merge patch to the ConfigMap named
// name.
func (a kubeAPI) mergePatchConfigMap(ctx context.Context, name string, patch []byte) error {
	req := a.c.Patch(types.MergePatchType).AbsPath(coreV1).Namespace(a.ns).Resource("configmaps").Name(name).Param("fieldManager", fieldManager)
	return call(ctx, req.Body(patch), nil)
}

func (a kubeAPI) deleteConfigMap(ctx context.Context, name string) error {
	return call(ctx, a.c.Delete().AbsPath(coreV1).Namespace(a.ns).Resource("configmaps").Name(name), nil)
}

// createSecret creates s; the answer (which holds its data) is not kept.
func (a kubeAPI) createSecret(ctx context.Context, s *corev1.Secret) error {
	s = s.DeepCopy()
	s.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}
	return a.send(ctx, a.c.Post().AbsPath(coreV1).Namespace(a.ns).Resource("secrets").Param("fieldManager", fieldManager), s, nil)
}

// mergePatchJob applies a JSON merge patch to the Job named name.
func (a kubeAPI) mergePatchJob(ctx context.Context, name string, patch []byte) error {
	req := a.c.Patch(types.MergePatchType).AbsPath(batchV1).Namespace(a.ns).Resource("jobs").Name(name).Param("fieldManager", fieldManager)
	return call(ctx, req.Body(patch), nil)
}

func (a kubeAPI) listPods(ctx context.Context, selector string) (*corev1.PodList, error) {
	var l corev1.PodList
	err := call(ctx, a.c.Get().AbsPath(coreV1).Namespace(a.ns).Resource("pods").Param("labelSelector", selector), &l)
	if err != nil {
		return nil, err
	}
	return &l, nil
}

// podLog reads at most limit bytes of the log of container in pod.
func (a kubeAPI) podLog(ctx context.Context, pod, container string, limit int64) ([]byte, error) {
	req := a.c.Get().AbsPath(coreV1).Namespace(a.ns).Resource("pods").Name(pod).SubResource("log").
		Param("container", container).Param("limitBytes", strconv.FormatInt(limit, 10))
	return do(ctx, req)
}

// send sends obj as the JSON body of req and decodes the response into
// out, if not nil.
func (a kubeAPI) send(ctx context.Context, req *rest.Request, obj, out any) error {
	b, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	return call(ctx, req.SetHeader("Content-Type", "application/json").Body(b), out)
}

// call sends req and decodes its JSON response into out, if not nil.
func call(ctx context.Context, req *rest.Request, out any) error {
	b, err := do(ctx, req)
	if err != nil || out == nil {
		return err
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("decode %s: %w", req.URL().Path, err)
	}
	return nil
}

// do sends req and returns the response body. An error the API server
// explains with a Status is a *apierrors.StatusError made from it, as a
// typed clientset returns it, whatever the REST client's serializer:
// without one, the error would carry a reason guessed from the status
// code (Conflict for AlreadyExists).
func do(ctx context.Context, req *rest.Request) ([]byte, error) {
	b, err := req.SetHeader("Accept", "application/json, */*").DoRaw(ctx)
	if err == nil {
		return b, nil
	}
	if st, ok := decodeStatus(b); ok {
		return nil, &apierrors.StatusError{ErrStatus: st}
	}
	return nil, err
}

// decodeStatus reads a failure Status from a response body.
func decodeStatus(b []byte) (metav1.Status, bool) {
	var st metav1.Status
	if json.Unmarshal(b, &st) != nil || st.Kind != "Status" || st.Status != metav1.StatusFailure {
		return metav1.Status{}, false
	}
	return st, true
}

// coordinationV1 is the API path of Leases.
const coordinationV1 = "/apis/coordination.k8s.io/v1"

// getLease reads the Lease named name in namespace ns.
func (a kubeAPI) getLease(ctx context.Context, ns, name string) (*coordinationv1.Lease, error) {
	var l coordinationv1.Lease
	err := call(ctx, a.c.Get().AbsPath(coordinationV1).Namespace(ns).Resource("leases").Name(name), &l)
	if err != nil {
		return nil, err
	}
	return &l, nil
}

// networkingV1 is the API path of NetworkPolicies.
const networkingV1 = "/apis/networking.k8s.io/v1"

func (a kubeAPI) createNetworkPolicy(ctx context.Context, np *networkingv1.NetworkPolicy) error {
	np = np.DeepCopy()
	np.TypeMeta = metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"}
	return a.send(ctx, a.c.Post().AbsPath(networkingV1).Namespace(a.ns).Resource("networkpolicies").Param("fieldManager", fieldManager), np, nil)
}
