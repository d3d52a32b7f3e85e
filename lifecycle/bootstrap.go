package lifecycle

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"slices"
	"sort"

	"github.com/fluxcd/cli-utils/pkg/kstatus/polling"
	"github.com/fluxcd/pkg/ssa"
	"github.com/fluxcd/pkg/ssa/utils"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"nuon.dev/nuon/manifests"
)

// AgentNamespace is where manifests/ runs the agent.
const AgentNamespace = "nuon-system"

// FieldManager owns the fields the bootstrap applies.
const FieldManager = "nuon-install"

// Bootstrap is what the agent's Deployment needs besides manifests/.
type Bootstrap struct {
	// Install and Repo fill NUON_INSTALL and NUON_REPO.
	Install, Repo string
	// Key is the install's private key (PEM): the Secret nuon-agent-key.
	Key []byte
	// Trust is the allowed_signers file (deprecated): allowed_signers in
	// the ConfigMap nuon-agent-trust, the agent's --trust.
	Trust []byte
	// TrustRoot is the trust root's version the install was given at
	// creation (TrustRootFile): trust-root.json in the ConfigMap
	// nuon-agent-trust, and the agent is started with --trust-root
	// instead of --trust, so that it follows the root's chain. One of
	// Trust and TrustRoot is required; TrustRoot wins.
	TrustRoot []byte
	// Registry, RegistryUsername and RegistryPassword are the install
	// registry's host and credentials: --registry, --registry-username and
	// NUON_REGISTRY_PASSWORD from the Secret nuon-registry. Without a
	// username (ECR) only --registry is set and no Secret is made: the
	// agent asks ECR for a token with its own role. RegistryCA,
	// when set, is its CA (the ConfigMap nuon-registry-ca: not a secret).
	Registry, RegistryUsername, RegistryPassword string
	RegistryCA                                   []byte
	// GitToken, when set, is the tenant repository's token:
	// NUON_GIT_TOKEN from the Secret nuon-git.
	GitToken string
}

// BootstrapObjects are manifests/ with the install's inputs: the agent's
// Deployment pointed at them, its Secrets and ConfigMaps. Secrets hold
// only the key, the registry password and the git token.
func BootstrapObjects(b Bootstrap) ([]*unstructured.Unstructured, error) {
	names, err := fs.Glob(manifests.FS, "*.yaml")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	var objs []*unstructured.Unstructured
	for _, n := range names {
		data, err := fs.ReadFile(manifests.FS, n)
		if err != nil {
			return nil, err
		}
		os, err := utils.ReadObjects(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("manifests/%s: %w", n, err)
		}
		objs = append(objs, os...)
	}
	found := false
	for i, o := range objs {
		if o.GetKind() != "Deployment" || o.GetName() != "nuon-agent" {
			continue
		}
		found = true
		var d appsv1.Deployment
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d); err != nil {
			return nil, err
		}
		if err := configureAgent(&d, b); err != nil {
			return nil, err
		}
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&d)
		if err != nil {
			return nil, err
		}
		objs[i] = &unstructured.Unstructured{Object: u}
		objs[i].SetAPIVersion("apps/v1")
		objs[i].SetKind("Deployment")
		unstructured.RemoveNestedField(objs[i].Object, "status")
		unstructured.RemoveNestedField(objs[i].Object, "metadata", "creationTimestamp")
		unstructured.RemoveNestedField(objs[i].Object, "spec", "template", "metadata", "creationTimestamp")
	}
	if !found {
		return nil, fmt.Errorf("manifests/ has no nuon-agent Deployment")
	}
	secret := func(name string, data map[string]string) (*unstructured.Unstructured, error) {
		return toUnstructured(&corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: objectMeta(name), Type: corev1.SecretTypeOpaque, Data: bytesOf(data)})
	}
	configMap := func(name string, data map[string]string) (*unstructured.Unstructured, error) {
		return toUnstructured(&corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: objectMeta(name), Data: data})
	}
	add := func(o *unstructured.Unstructured, err error) error {
		if err == nil {
			objs = append(objs, o)
		}
		return err
	}
	if err := add(secret("nuon-agent-key", map[string]string{"agent.key": string(b.Key)})); err != nil {
		return nil, err
	}
	trust := map[string]string{}
	switch {
	case len(b.TrustRoot) > 0:
		trust[trustRootKey] = string(b.TrustRoot)
	case len(b.Trust) > 0:
		trust["allowed_signers"] = string(b.Trust)
	default:
		return nil, fmt.Errorf("bootstrap: the agent needs the trust root (or an allowed_signers file) to judge desired state")
	}
	if err := add(configMap("nuon-agent-trust", trust)); err != nil {
		return nil, err
	}
	if b.RegistryUsername != "" {
		if err := add(secret("nuon-registry", map[string]string{"password": b.RegistryPassword})); err != nil {
			return nil, err
		}
	}
	if len(b.RegistryCA) > 0 {
		if err := add(configMap("nuon-registry-ca", map[string]string{"ca.pem": string(b.RegistryCA)})); err != nil {
			return nil, err
		}
	}
	if b.GitToken != "" {
		if err := add(secret("nuon-git", map[string]string{"token": b.GitToken})); err != nil {
			return nil, err
		}
	}
	return objs, nil
}

func objectMeta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: AgentNamespace,
		Labels: map[string]string{"app.kubernetes.io/name": "nuon-agent", "app.kubernetes.io/part-of": "nuon"}}
}

func toUnstructured(o runtime.Object) (*unstructured.Unstructured, error) {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
	if err != nil {
		return nil, err
	}
	out := &unstructured.Unstructured{Object: u}
	unstructured.RemoveNestedField(out.Object, "metadata", "creationTimestamp")
	return out, nil
}

// trustRootKey is the trust root's key in the ConfigMap nuon-agent-trust,
// mounted at /etc/nuon/trust.
const trustRootKey = "trust-root.json"

// Agent arguments that name what judges desired state.
const (
	trustArg     = "--trust=/etc/nuon/trust/allowed_signers"
	trustRootArg = "--trust-root=/etc/nuon/trust/" + trustRootKey
)

// configureAgent points the agent's container at the install.
func configureAgent(d *appsv1.Deployment, b Bootstrap) error {
	spec := &d.Spec.Template.Spec
	var c *corev1.Container
	for i := range spec.Containers {
		if spec.Containers[i].Name == "agent" {
			c = &spec.Containers[i]
		}
	}
	if c == nil {
		return fmt.Errorf("the nuon-agent Deployment has no agent container")
	}
	for i := range c.Env {
		switch c.Env[i].Name {
		case "NUON_REPO":
			c.Env[i].Value = b.Repo
		case "NUON_INSTALL":
			c.Env[i].Value = b.Install
		}
	}
	fromSecret := func(name, secret, key string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: key}}}
	}
	if len(b.TrustRoot) > 0 {
		// The root replaces the allowed_signers file: the agent then
		// follows the chain from this version (its workdir keeps the
		// newest it verified).
		i := slices.Index(c.Args, trustArg)
		if i < 0 {
			return fmt.Errorf("the agent container has no %s to replace with %s", trustArg, trustRootArg)
		}
		c.Args[i] = trustRootArg
	}
	if b.Registry != "" {
		c.Args = append(c.Args, "--registry="+b.Registry)
	}
	// ECR (no username): the agent gets its token with its own role.
	if b.Registry != "" && b.RegistryUsername != "" {
		c.Args = append(c.Args, "--registry-username="+b.RegistryUsername)
		c.Env = append(c.Env, fromSecret(registryPasswordEnv, "nuon-registry", "password"))
	}
	if len(b.RegistryCA) > 0 {
		c.Args = append(c.Args, "--registry-ca=/etc/nuon/registry/ca.pem")
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "registry-ca", MountPath: "/etc/nuon/registry", ReadOnly: true})
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "registry-ca", VolumeSource: corev1.VolumeSource{
			ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "nuon-registry-ca"}}}})
	}
	if b.GitToken != "" {
		c.Env = append(c.Env, fromSecret(gitTokenEnv, "nuon-git", "token"))
	}
	return nil
}

// ApplyAgent applies BootstrapObjects(b) to the cluster of cfg by
// server-side apply (fluxcd/pkg/ssa, in stages: namespaces first), and
// returns what changed. Applying again changes nothing.
func ApplyAgent(ctx context.Context, cfg *rest.Config, b Bootstrap) (*ssa.ChangeSet, error) {
	objs, err := BootstrapObjects(b)
	if err != nil {
		return nil, err
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, hc)
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{HTTPClient: hc, Mapper: mapper})
	if err != nil {
		return nil, err
	}
	m := ssa.NewResourceManager(c, polling.NewStatusPoller(c, mapper, polling.Options{}), ssa.Owner{Field: FieldManager, Group: "nuon.dev"})
	cs, err := m.ApplyAllStaged(ctx, objs, ssa.DefaultApplyOptions())
	if err != nil {
		return nil, fmt.Errorf("apply the agent's manifests: %w", err)
	}
	return cs, nil
}

func bytesOf(m map[string]string) map[string][]byte {
	out := make(map[string][]byte, len(m))
	for k, v := range m {
		out[k] = []byte(v)
	}
	return out
}
