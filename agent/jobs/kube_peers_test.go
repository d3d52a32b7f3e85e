package jobs

import (
	"net/netip"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestParseEgress(t *testing.T) {
	for _, tt := range []struct {
		in      string
		cidr    string
		ns, sel string
		port    int32
		err     string
	}{
		{in: "10.0.64.0/20,443", cidr: "10.0.64.0/20", port: 443},
		{in: "169.254.20.10/32", cidr: "169.254.20.10/32"},
		{in: "fd00::/8,5000", cidr: "fd00::/8", port: 5000},
		{in: "pods:registry/app=zot,5000", ns: "registry", sel: "app=zot", port: 5000},
		{in: "pods:kube-system/k8s-app=kube-dns", ns: "kube-system", sel: "k8s-app=kube-dns"},
		{in: "0.0.0.0/0", err: "every address"},
		{in: "10.0.64.1/20", err: "host bits set; did you mean 10.0.64.0/20"},
		{in: "10.0.64.0/20,0", err: "port"},
		{in: "10.0.64.0/20,https", err: "port"},
		{in: "registry.internal", err: "want a CIDR"},
		{in: "pods:Registry/app=zot", err: "namespace"},
		{in: "pods:registry/app", err: "want pods:NAMESPACE/KEY=VALUE"},
		{in: "pods:registry/app=a b", err: "label value"},
	} {
		t.Run(tt.in, func(t *testing.T) {
			r, err := ParseEgress(tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("ParseEgress = %+v, %v; want an error saying %q", r, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			to := r.To[0]
			switch {
			case tt.cidr != "" && (to.IPBlock == nil || to.IPBlock.CIDR != tt.cidr):
				t.Errorf("peer %+v, want %s", to, tt.cidr)
			case tt.ns != "" && (to.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != tt.ns || to.PodSelector == nil):
				t.Errorf("peer %+v, want pods of %s", to, tt.ns)
			}
			if tt.port == 0 && len(r.Ports) != 0 || tt.port != 0 && (len(r.Ports) != 1 || r.Ports[0].Port.IntVal != tt.port) {
				t.Errorf("ports %+v, want %d", r.Ports, tt.port)
			}
		})
	}
}

// FuzzParseEgress: whatever a flag says, a rule comes out only with one
// peer that is a masked CIDR narrower than everything or a valid
// namespace and label, and at most one valid port.
func FuzzParseEgress(f *testing.F) {
	for _, s := range []string{"10.0.64.0/20,443", "pods:registry/app=zot,5000", "fd00::/8", "0.0.0.0/0", "pods:/=", ",", "10.0.0.0/8,65536"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseEgress(s)
		if err != nil {
			return
		}
		if len(r.To) != 1 || len(r.Ports) > 1 {
			t.Fatalf("%q: rule %+v", s, r)
		}
		if p := r.Ports; len(p) == 1 && (p[0].Port.IntVal < 1 || p[0].Port.IntVal > 65535) {
			t.Fatalf("%q: port %v", s, p[0].Port)
		}
		to := r.To[0]
		if to.IPBlock != nil {
			p, err := netip.ParsePrefix(to.IPBlock.CIDR)
			if err != nil || p != p.Masked() || p.Bits() == 0 {
				t.Fatalf("%q: CIDR %s", s, to.IPBlock.CIDR)
			}
			return
		}
		ns := to.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"]
		if len(validation.IsDNS1123Label(ns)) > 0 || len(to.PodSelector.MatchLabels) != 1 {
			t.Fatalf("%q: peer %+v", s, to)
		}
	})
}
