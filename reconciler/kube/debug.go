package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/yaml"

	"nuon.dev/nuon/internal/debugcmd"
)

// shortNames are kubectl's short names for the common kinds.
var shortNames = map[string]string{
	"po": "pods", "svc": "services", "cm": "configmaps", "deploy": "deployments.apps",
	"sts": "statefulsets.apps", "ds": "daemonsets.apps", "rs": "replicasets.apps",
	"ing": "ingresses.networking.k8s.io", "pvc": "persistentvolumeclaims", "sa": "serviceaccounts",
	"cj": "cronjobs.batch", "hpa": "horizontalpodautoscalers.autoscaling", "ep": "endpoints",
	"pdb": "poddisruptionbudgets.policy", "netpol": "networkpolicies.networking.k8s.io",
}

// lastApplied is kubectl's annotation that copies a whole object, Secret
// data included.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// Debug answers cmd, a Kubernetes command of package debugcmd whose
// namespace the caller has checked, into out. It reads only; its requests
// go to the API server cfg names.
func Debug(ctx context.Context, cfg *rest.Config, cmd debugcmd.Command, out io.Writer) error {
	if cmd.Namespace == "" {
		return &debugcmd.Refusal{Command: cmd.Words(), Reason: "no namespace"}
	}
	cfg = rest.CopyConfig(cfg)
	if cfg.UserAgent == "" {
		cfg.UserAgent = "nuon-debug"
	}
	d := &debugger{cmd: cmd, out: out}
	var err error
	if d.cs, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	switch cmd.Op {
	case debugcmd.OpEvents:
		return d.events(ctx, "")
	case debugcmd.OpLogs:
		return d.logs(ctx)
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	if d.mapper, err = apiutil.NewDynamicRESTMapper(cfg, hc); err != nil {
		return err
	}
	if d.dyn, err = dynamic.NewForConfigAndClient(cfg, hc); err != nil {
		return err
	}
	m, err := d.mapping()
	if err != nil {
		return err
	}
	res := d.dyn.Resource(m.Resource).Namespace(cmd.Namespace)
	if cmd.Op == debugcmd.OpGet && cmd.Name == "" {
		list, err := res.List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		return d.table(list.Items)
	}
	u, err := res.Get(ctx, cmd.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		fmt.Fprintf(out, "%s %q not found in namespace %s\n", m.GroupVersionKind.Kind, cmd.Name, cmd.Namespace)
		return nil
	}
	if err != nil {
		return err
	}
	clean(u)
	if cmd.Op == debugcmd.OpGet {
		b, err := yaml.Marshal(u.Object)
		if err != nil {
			return err
		}
		_, err = out.Write(b)
		return err
	}
	return d.describe(ctx, u)
}

type debugger struct {
	cmd    debugcmd.Command
	out    io.Writer
	cs     kubernetes.Interface
	dyn    dynamic.Interface
	mapper meta.RESTMapper
}

// mapping resolves the command's kind: a resource (pods, deployments.apps),
// a kind (Deployment, deployment) or a short name (deploy), namespaced
// only.
func (d *debugger) mapping() (*meta.RESTMapping, error) {
	kind := d.cmd.Kind
	if full, ok := shortNames[strings.ToLower(kind)]; ok {
		kind = full
	}
	gr := schema.ParseGroupResource(strings.ToLower(kind))
	gvk, err := d.mapper.KindFor(gr.WithVersion(""))
	if err != nil {
		if meta.IsNoMatchError(err) {
			return nil, &debugcmd.Refusal{Command: d.cmd.Words(), Reason: fmt.Sprintf("the cluster has no kind %q", d.cmd.Kind)}
		}
		return nil, err
	}
	m, err := d.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, err
	}
	if m.Scope.Name() != meta.RESTScopeNameNamespace {
		return nil, &debugcmd.Refusal{Command: d.cmd.Words(), Reason: fmt.Sprintf("%s is cluster-scoped: only objects in the install's namespaces can be read", gvk.Kind)}
	}
	return m, nil
}

// clean drops what must not or need not leave the install: Secret values,
// kubectl's last-applied copy, managed fields.
func clean(u *unstructured.Unstructured) {
	u.SetManagedFields(nil)
	if a := u.GetAnnotations(); a != nil {
		if _, ok := a[lastApplied]; ok {
			a[lastApplied] = "(hidden)"
			u.SetAnnotations(a)
		}
	}
	if u.GetKind() == "Secret" && u.GroupVersionKind().Group == "" {
		for _, field := range []string{"data", "stringData"} {
			m, ok := u.Object[field].(map[string]any)
			if !ok {
				continue
			}
			for k, v := range m {
				s, _ := v.(string)
				if field == "data" {
					m[k] = fmt.Sprintf("(hidden, %d bytes base64)", len(s))
				} else {
					m[k] = fmt.Sprintf("(hidden, %d bytes)", len(s))
				}
			}
		}
	}
}

// table lists objects: name, health, created.
func (d *debugger) table(items []unstructured.Unstructured) error {
	w := tabwriter.NewWriter(d.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tHEALTH\tCREATED\tMESSAGE")
	slices.SortFunc(items, func(a, b unstructured.Unstructured) int { return strings.Compare(a.GetName(), b.GetName()) })
	for i := range items {
		u := &items[i]
		health, msg := "Unknown", ""
		if res, err := status.Compute(u); err == nil {
			health, msg = Status(res.Status), res.Message
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", u.GetName(), health, u.GetCreationTimestamp().UTC().Format(time.RFC3339), msg)
	}
	if len(items) == 0 {
		fmt.Fprintf(w, "(no %s in namespace %s)\n", d.cmd.Kind, d.cmd.Namespace)
	}
	return w.Flush()
}

// describe writes a readable summary of u: identity, labels, health,
// conditions, containers of a pod, and the events about it.
func (d *debugger) describe(ctx context.Context, u *unstructured.Unstructured) error {
	w := tabwriter.NewWriter(d.out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "Kind:\t%s\n", u.GroupVersionKind().GroupKind())
	fmt.Fprintf(w, "Name:\t%s\n", u.GetName())
	fmt.Fprintf(w, "Namespace:\t%s\n", u.GetNamespace())
	fmt.Fprintf(w, "Created:\t%s\n", u.GetCreationTimestamp().UTC().Format(time.RFC3339))
	fmt.Fprintf(w, "Generation:\t%d\n", u.GetGeneration())
	labels := u.GetLabels()
	for i, k := range slices.Sorted(maps.Keys(labels)) {
		head := ""
		if i == 0 {
			head = "Labels:"
		}
		fmt.Fprintf(w, "%s\t%s=%s\n", head, k, labels[k])
	}
	if res, err := status.Compute(u); err == nil {
		fmt.Fprintf(w, "Health:\t%s\n", Status(res.Status))
		if res.Message != "" {
			fmt.Fprintf(w, "Message:\t%s\n", res.Message)
		}
	}
	if u.GetKind() == "Secret" {
		data, _ := u.Object["data"].(map[string]any)
		fmt.Fprintf(w, "Keys:\t%s\n", strings.Join(slices.Sorted(maps.Keys(data)), ", "))
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	if len(conds) > 0 {
		fmt.Fprintln(w, "Conditions:")
		fmt.Fprintln(w, "  TYPE\tSTATUS\tREASON\tMESSAGE")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			fmt.Fprintf(w, "  %v\t%v\t%v\t%v\n", m["type"], m["status"], orEmpty(m["reason"]), orEmpty(m["message"]))
		}
	}
	if u.GetKind() == "Pod" {
		d.podContainers(w, u)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(d.out, "Events:")
	return d.events(ctx, u.GetName())
}

func (d *debugger) podContainers(w io.Writer, u *unstructured.Unstructured) {
	containers, _, _ := unstructured.NestedSlice(u.Object, "spec", "containers")
	statuses, _, _ := unstructured.NestedSlice(u.Object, "status", "containerStatuses")
	byName := map[string]map[string]any{}
	for _, s := range statuses {
		if m, ok := s.(map[string]any); ok {
			byName[fmt.Sprint(m["name"])] = m
		}
	}
	fmt.Fprintln(w, "Containers:")
	fmt.Fprintln(w, "  NAME\tIMAGE\tREADY\tRESTARTS\tSTATE")
	for _, c := range containers {
		m, _ := c.(map[string]any)
		name := fmt.Sprint(m["name"])
		st := byName[name]
		state := "(no status)"
		if s, ok := st["state"].(map[string]any); ok {
			for k := range s {
				state = k
			}
		}
		fmt.Fprintf(w, "  %s\t%v\t%v\t%v\t%s\n", name, m["image"], orEmpty(st["ready"]), orEmpty(st["restartCount"]), state)
	}
}

// events lists the namespace's events, or those about the object named,
// oldest first.
func (d *debugger) events(ctx context.Context, about string) error {
	opts := metav1.ListOptions{}
	if about != "" {
		opts.FieldSelector = "involvedObject.name=" + about
	}
	list, err := d.cs.CoreV1().Events(d.cmd.Namespace).List(ctx, opts)
	if err != nil {
		return err
	}
	when := func(e *corev1.Event) time.Time {
		switch {
		case !e.LastTimestamp.IsZero():
			return e.LastTimestamp.Time
		case !e.EventTime.IsZero():
			return e.EventTime.Time
		}
		return e.CreationTimestamp.Time
	}
	slices.SortStableFunc(list.Items, func(a, b corev1.Event) int { return when(&a).Compare(when(&b)) })
	w := tabwriter.NewWriter(d.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "TIME\tTYPE\tREASON\tOBJECT\tCOUNT\tMESSAGE")
	for i := range list.Items {
		e := &list.Items[i]
		fmt.Fprintf(w, "%s\t%s\t%s\t%s/%s\t%d\t%s\n", when(e).UTC().Format(time.RFC3339), e.Type, e.Reason,
			e.InvolvedObject.Kind, e.InvolvedObject.Name, max(e.Count, 1), strings.TrimSpace(e.Message))
	}
	if len(list.Items) == 0 {
		fmt.Fprintln(w, "(no events)")
	}
	return w.Flush()
}

// logs streams a pod's log into out until out is full (debugcmd.ErrLimit)
// or the log ends.
func (d *debugger) logs(ctx context.Context) error {
	opts := &corev1.PodLogOptions{Container: d.cmd.Container}
	if d.cmd.Tail > 0 {
		opts.TailLines = &d.cmd.Tail
	}
	if d.cmd.Since > 0 {
		s := max(int64(d.cmd.Since/time.Second), 1)
		opts.SinceSeconds = &s
	}
	stream, err := d.cs.CoreV1().Pods(d.cmd.Namespace).GetLogs(d.cmd.Name, opts).Stream(ctx)
	if err != nil {
		return fmt.Errorf("logs of pod %s in %s: %w", d.cmd.Name, d.cmd.Namespace, err)
	}
	defer stream.Close()
	n, err := io.Copy(d.out, stream)
	if errors.Is(err, debugcmd.ErrLimit) {
		return nil
	}
	if err == nil && n == 0 {
		// The API server answers an unscheduled pod with an empty log.
		fmt.Fprintf(d.out, "(no log lines: pod %s has not run or has written nothing)\n", d.cmd.Name)
	}
	return err
}

func orEmpty(v any) any {
	if v == nil {
		return ""
	}
	return v
}
