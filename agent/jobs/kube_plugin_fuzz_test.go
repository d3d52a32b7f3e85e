package jobs

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1 "k8s.io/api/batch/v1"

	"nuon.dev/nuon/schemas"
)

// FuzzRegistryEgress feeds the NetworkPolicy of a plugin job not granted
// the network with artifact references of any shape: whatever they are,
// the policy lets out no more than DNS and one TCP port to single
// addresses per registry, never everything, and a name that does not
// resolve fails the job instead of widening the policy.
func FuzzRegistryEgress(f *testing.F) {
	for _, s := range []string{
		"127.0.0.1:5000/nuon-acme/plugins/zonefile@sha256:" + strings.Repeat("a", 64),
		"[::1]:5000/p@sha256:" + strings.Repeat("b", 64),
		"registry.acme.internal/p@sha256:" + strings.Repeat("c", 64),
		"0.0.0.0/p:tag",
		"::ffff:10.0.0.1/p",
		"",
		"a:99999/p",
	} {
		f.Add(s)
	}
	lookup := func(_ context.Context, _, host string) ([]netip.Addr, error) {
		if host == "registry.acme.internal" {
			return []netip.Addr{netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("fd00::5")}, nil
		}
		return nil, errors.New("no such host")
	}
	f.Fuzz(func(t *testing.T, local string) {
		k := &Kube{Namespace: "nuon-system", LookupIP: lookup}
		job := &schemas.Job{ID: "dns-1", Artifacts: []schemas.Artifact{{Name: schemas.PluginArtifactName, Local: local}}}
		egress, err := k.registryEgress(context.Background(), job)
		if err != nil {
			if egress != nil {
				t.Fatalf("an error and rules: %v", egress)
			}
			return
		}
		created := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "nuon-dns-1", Labels: map[string]string{LabelJob: "x"}}}
		np := k.networkPolicy("nuon-dns-1-net", created, metav1.OwnerReference{}, &schemas.PluginCapabilities{}, false, egress)
		for i, r := range np.Spec.Egress {
			if len(r.To) == 0 || len(r.Ports) == 0 {
				t.Fatalf("rule %d of %q lets out to anywhere or on any port: %+v", i, local, r)
			}
			for _, p := range r.To {
				if p.IPBlock == nil {
					if i != 0 {
						t.Fatalf("rule %d of %q selects pods: %+v", i, local, p)
					}
					continue
				}
				pre, err := netip.ParsePrefix(p.IPBlock.CIDR)
				if err != nil || pre.Bits() != pre.Addr().BitLen() {
					t.Fatalf("rule %d of %q allows %s: not one address", i, local, p.IPBlock.CIDR)
				}
			}
			for _, p := range r.Ports {
				if p.Port == nil || p.Port.IntVal < 1 || p.Port.IntVal > 65535 {
					t.Fatalf("rule %d of %q: port %v", i, local, p.Port)
				}
			}
		}
		if len(np.Spec.Egress) != 1+len(egress) || !containsPolicyType(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) {
			t.Fatalf("policy of %q: %+v", local, np.Spec)
		}
	})
}

func containsPolicyType(ts []networkingv1.PolicyType, t networkingv1.PolicyType) bool {
	for _, x := range ts {
		if x == t {
			return true
		}
	}
	return false
}
