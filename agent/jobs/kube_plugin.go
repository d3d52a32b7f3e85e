package jobs

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"nuon.dev/nuon/plugin"
	"nuon.dev/nuon/schemas"
)

// A job of a vendor's plugin (a component of type plugin: its manifest
// carries Grants) runs in a pod that has only what its plugin is granted.
const (
	// PluginKeyFile is the vendor's public key in a plugin job's
	// ConfigMap, mounted beside the manifest: the pod verifies the
	// plugin's artifact with it again before it runs it.
	PluginKeyFile    = "plugin-key.pub"
	podPluginKeyFile = PodManifestDir + "/" + PluginKeyFile
	// registryPort is the install registry's port when its reference
	// names none.
	registryPort = 443
)

// PluginAdmission checks a job of a vendor's plugin before any object of
// it is created, and returns what its plugin is granted (its signed
// manifest's needs, within job.Grants): plugin.Admit, with the install
// registry's client and the vendor's key.
type PluginAdmission func(ctx context.Context, job *schemas.Job) (schemas.PluginCapabilities, error)

// DefaultPluginDNS is where a plugin job not granted the network may send
// DNS queries (UDP and TCP port 53): the cluster DNS, CoreDNS's pods in
// kube-system as kubeadm, EKS, GKE and AKS label them.
var DefaultPluginDNS = []networkingv1.NetworkPolicyPeer{{
	NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "kube-system"}},
	PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-dns"}},
}}

// admitPlugin asks Kube.AdmitPlugin about a job of a vendor's plugin and
// keeps what the plugin is granted and the egress its pod needs; a
// refusal fails the job before anything of it exists in the cluster.
func (r *kubeRun) admitPlugin(ctx context.Context) error {
	if r.job.Grants == nil {
		return nil
	}
	k := r.k
	if k.AdmitPlugin == nil || len(k.PluginKey) == 0 {
		return fmt.Errorf("%w: plugin %s: the kubernetes runner has no vendor key to admit a vendor's plugin with (Kube.AdmitPlugin and Kube.PluginKey: nuon agent --vendor-key)", ErrJobFailed, r.job.Plugin)
	}
	var granted schemas.PluginCapabilities
	var err error
	if k.AdmitPluginImage != nil && plugin.PinsImage(&r.job) {
		r.image, granted, err = k.AdmitPluginImage(ctx, &r.job)
	} else {
		granted, err = k.AdmitPlugin(ctx, &r.job)
	}
	if err != nil {
		r.logger.Warn("plugin refused: no object created", "error", err)
		return fmt.Errorf("%w: %w", ErrJobFailed, err)
	}
	r.granted = &granted
	if r.env != nil && !granted.CloudRole {
		// The cloud role's credentials are for plugins granted it.
		r.logger.Info("cloud credentials withheld: the plugin is not granted cloudRole")
		r.env = nil
	}
	if !granted.Network && r.image == nil {
		// The process form's job container pulls the plugin and the
		// job's artifacts; the image form's pod needs no network (the
		// agent stages what it reads).
		if r.egress, err = k.registryEgress(ctx, &r.job); err != nil {
			return err
		}
	}
	form := "process"
	if r.image != nil {
		form = "image " + r.image.Ref.String()
	}
	r.logger.Info("plugin admitted", "form", form, "network", granted.Network, "secrets", granted.Secrets,
		"cloud_role", granted.CloudRole, "writable_state", granted.WritableState, "env", granted.Env)
	return nil
}

// registryEgress is the egress a plugin job not granted the network needs
// for itself: the install registry its pod pulls the plugin and the
// job's artifacts from, by address (an IP in the artifacts' references,
// or the addresses the registry's name resolves to now), on its port.
func (k *Kube) registryEgress(ctx context.Context, job *schemas.Job) ([]networkingv1.NetworkPolicyEgressRule, error) {
	var hosts []string
	for _, a := range job.Artifacts {
		ref, err := name.ParseReference(a.Local)
		if err != nil {
			return nil, fmt.Errorf("artifact %s: %w", a.Name, err)
		}
		if h := ref.Context().RegistryStr(); !slices.Contains(hosts, h) {
			hosts = append(hosts, h)
		}
	}
	slices.Sort(hosts)
	lookup := k.LookupIP
	if lookup == nil {
		lookup = net.DefaultResolver.LookupNetIP
	}
	var rules []networkingv1.NetworkPolicyEgressRule
	for _, h := range hosts {
		host, port := h, registryPort
		if hp, ps, err := net.SplitHostPort(h); err == nil {
			if port, err = strconv.Atoi(ps); err != nil || port < 1 || port > 65535 {
				return nil, fmt.Errorf("registry %s: port %q", h, ps)
			}
			host = hp
		}
		var addrs []netip.Addr
		if a, err := netip.ParseAddr(host); err == nil {
			addrs = []netip.Addr{a}
		} else if addrs, err = lookup(ctx, "ip", host); err != nil {
			return nil, fmt.Errorf("the install registry %s, which a plugin job's pod may reach: %w", host, err)
		}
		rule := networkingv1.NetworkPolicyEgressRule{Ports: []networkingv1.NetworkPolicyPort{{
			Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(int32(port))),
		}}}
		for _, a := range addrs {
			a = a.Unmap()
			rule.To = append(rule.To, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{
				CIDR: netip.PrefixFrom(a, a.BitLen()).String(),
			}})
		}
		rules = append(rules, rule)
	}
	return rules, nil
}

// networkPolicy is the NetworkPolicy named name of a plugin job's pod,
// created owned by the Job: it selects the Job's pods by the Job's own
// selector (its UID), lets nothing in, and lets out everything with the
// network granted. Without it, the image form's pod (image) may send
// nothing anywhere, not even a DNS query: every container of it is the
// plugin's or works on what the agent staged. The process form's pod may
// reach DNS (Kube.PluginDNS), the install registry (egress) and
// Kube.PluginEgress, which its job container pulls the plugin and the
// job's artifacts with.
func (k *Kube) networkPolicy(name string, created *batchv1.Job, owner metav1.OwnerReference, granted *schemas.PluginCapabilities, image bool, egress []networkingv1.NetworkPolicyEgressRule) *networkingv1.NetworkPolicy {
	sel := metav1.LabelSelector{MatchLabels: map[string]string{LabelJob: created.Labels[LabelJob]}}
	if created.Spec.Selector != nil {
		sel = *created.Spec.Selector.DeepCopy()
	}
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: k.Namespace,
			Labels: created.Labels, Annotations: map[string]string{AnnotationJobID: created.Annotations[AnnotationJobID]},
			OwnerReferences: []metav1.OwnerReference{owner},
		},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: sel,
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress:     []networkingv1.NetworkPolicyIngressRule{},
			Egress:      []networkingv1.NetworkPolicyEgressRule{},
		},
	}
	switch {
	case granted.Network:
		np.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{{}}
		return np
	case image:
		return np
	}
	dns := k.PluginDNS
	if dns == nil {
		dns = DefaultPluginDNS
	}
	np.Spec.Egress = append(np.Spec.Egress, networkingv1.NetworkPolicyEgressRule{To: dns, Ports: []networkingv1.NetworkPolicyPort{
		{Protocol: ptr.To(corev1.ProtocolUDP), Port: ptr.To(intstr.FromInt32(53))},
		{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(53))},
	}})
	np.Spec.Egress = append(np.Spec.Egress, egress...)
	np.Spec.Egress = append(np.Spec.Egress, k.PluginEgress...)
	return np
}

// pluginPod narrows the pod of a job of a vendor's plugin to what the
// plugin is granted: no service account token (the job reaches no API
// server), the job's secrets only with secrets, the state volume only with
// writableState and then only the component's own directory, and the
// command verifies the plugin again with the key in the ConfigMap and
// leaves the network to the pod's NetworkPolicy (a restricted pod may not
// make the network namespace the process runner gives a plugin).
func (k *Kube) pluginPod(spec *corev1.PodSpec, job *schemas.Job, granted *schemas.PluginCapabilities) {
	spec.AutomountServiceAccountToken = ptr.To(false)
	// Nor the cluster's Services' addresses in its environment.
	spec.EnableServiceLinks = ptr.To(false)
	c := &spec.Containers[0]
	if !granted.Secrets {
		c.EnvFrom = slices.DeleteFunc(c.EnvFrom, func(e corev1.EnvFromSource) bool {
			return e.SecretRef != nil && e.SecretRef.Name == k.SecretName
		})
	}
	// Only the volumes of the job itself: none of Kube.Volumes (the
	// agent's workdir, other components' state) but, with writableState,
	// the component's own state directory in it.
	spec.Volumes = slices.DeleteFunc(spec.Volumes, func(v corev1.Volume) bool {
		return slices.ContainsFunc(k.Volumes, func(kv corev1.Volume) bool { return kv.Name == v.Name })
	})
	c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
		return slices.ContainsFunc(k.VolumeMounts, func(km corev1.VolumeMount) bool { return km.Name == m.Name && km.MountPath == m.MountPath })
	})
	if mount, ok := stateMount(job.StateDir, k.VolumeMounts); ok && granted.WritableState {
		i := slices.IndexFunc(k.Volumes, func(v corev1.Volume) bool { return v.Name == mount.Name })
		if i >= 0 {
			spec.Volumes = append(spec.Volumes, k.Volumes[i])
			c.VolumeMounts = append(c.VolumeMounts, mount)
		}
	}
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return path.Clean(m.MountPath) == path.Clean(job.StateDir) }) {
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "state", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "state", MountPath: job.StateDir})
	}
	argv := slices.Clone(c.Command[:len(c.Command)-1])
	argv = append(argv, "--plugin-key", podPluginKeyFile, "--plugin-shared-network", c.Command[len(c.Command)-1])
	c.Command = argv
}

// stateMount is the mount of the directory dir alone, through the one of
// mounts that holds it (a subPath of its volume).
func stateMount(dir string, mounts []corev1.VolumeMount) (corev1.VolumeMount, bool) {
	dir = path.Clean(dir)
	for _, m := range mounts {
		mp := path.Clean(m.MountPath)
		if dir != mp && !strings.HasPrefix(dir, mp+"/") {
			continue
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(dir, mp), "/")
		return corev1.VolumeMount{Name: m.Name, MountPath: dir, SubPath: path.Join(m.SubPath, rel)}, true
	}
	return corev1.VolumeMount{}, false
}
