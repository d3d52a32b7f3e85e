package jobs

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
)

// ParsePeer reads where a plugin job not granted the network may send
// traffic, as an agent flag spells it:
//
//	CIDR                      addresses: 10.0.0.0/16, 169.254.20.10/32, fd00::/8
//	pods:NAMESPACE/KEY=VALUE  the pods labelled KEY=VALUE in NAMESPACE
//
// The addresses of an ECR VPC endpoint change, so name its subnets' CIDR;
// a registry or resolver inside the cluster is a set of pods.
func ParsePeer(s string) (networkingv1.NetworkPolicyPeer, error) {
	if rest, ok := strings.CutPrefix(s, "pods:"); ok {
		ns, label, ok := strings.Cut(rest, "/")
		key, value, ok2 := strings.Cut(label, "=")
		if !ok || !ok2 {
			return networkingv1.NetworkPolicyPeer{}, fmt.Errorf("peer %q: want pods:NAMESPACE/KEY=VALUE", s)
		}
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return networkingv1.NetworkPolicyPeer{}, fmt.Errorf("peer %q: namespace %q: %s", s, ns, strings.Join(errs, "; "))
		}
		if errs := validation.IsQualifiedName(key); len(errs) > 0 {
			return networkingv1.NetworkPolicyPeer{}, fmt.Errorf("peer %q: label key %q: %s", s, key, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(value); len(errs) > 0 {
			return networkingv1.NetworkPolicyPeer{}, fmt.Errorf("peer %q: label value %q: %s", s, value, strings.Join(errs, "; "))
		}
		return networkingv1.NetworkPolicyPeer{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
			PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{key: value}},
		}, nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return networkingv1.NetworkPolicyPeer{}, fmt.Errorf("peer %q: want a CIDR (10.0.0.0/16) or pods:NAMESPACE/KEY=VALUE: %w", s, err)
	}
	if p != p.Masked() {
		return networkingv1.NetworkPolicyPeer{}, fmt.Errorf("peer %q: host bits set; did you mean %s?", s, p.Masked())
	}
	if p.Bits() == 0 {
		return networkingv1.NetworkPolicyPeer{}, fmt.Errorf("peer %q: that is every address: grant the plugin the network instead", s)
	}
	return networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: p.String()}}, nil
}

// ParseEgress reads an egress rule as an agent flag spells it: a peer
// (ParsePeer) and, after a comma, the TCP port it may be reached on
// (none: every port): "10.0.64.0/20,443", "pods:registry/app=zot,5000".
func ParseEgress(s string) (networkingv1.NetworkPolicyEgressRule, error) {
	peer, port, hasPort := strings.Cut(s, ",")
	to, err := ParsePeer(peer)
	if err != nil {
		return networkingv1.NetworkPolicyEgressRule{}, err
	}
	rule := networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{to}}
	if hasPort {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return networkingv1.NetworkPolicyEgressRule{}, fmt.Errorf("egress %q: port %q is not 1 to 65535", s, port)
		}
		rule.Ports = []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(int32(n)))}}
	}
	return rule, nil
}
