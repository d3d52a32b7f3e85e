package kube

import (
	"testing"

	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"nuon.dev/nuon/schemas"
)

func TestStatus(t *testing.T) {
	for s, want := range map[status.Status]string{
		status.CurrentStatus:     schemas.HealthReady,
		status.InProgressStatus:  schemas.HealthProgressing,
		status.TerminatingStatus: schemas.HealthProgressing,
		status.FailedStatus:      schemas.HealthFailed,
		status.NotFoundStatus:    schemas.HealthFailed,
		status.UnknownStatus:     schemas.HealthUnknown,
	} {
		if got := Status(s); got != want {
			t.Errorf("Status(%s) = %s, want %s", s, got, want)
		}
	}
}

func TestWorst(t *testing.T) {
	order := []string{schemas.HealthReady, schemas.HealthUnknown, schemas.HealthProgressing, schemas.HealthFailed}
	for i, a := range order {
		for j, b := range order {
			want := order[max(i, j)]
			if got := Worst(a, b); got != want {
				t.Errorf("Worst(%s, %s) = %s, want %s", a, b, got, want)
			}
		}
	}
}

func TestKindName(t *testing.T) {
	for gk, want := range map[schema.GroupKind]string{
		{Kind: "ConfigMap"}:                                   "ConfigMap",
		{Group: "apps", Kind: "Deployment"}:                   "Deployment",
		{Group: "cert-manager.io", Kind: "Certificate"}:       "Certificate.cert-manager.io",
		{Group: "networking.k8s.io", Kind: "Ingress"}:         "Ingress",
		{Group: "gateway.networking.k8s.io", Kind: "Gateway"}: "Gateway.gateway.networking.k8s.io",
	} {
		if got := KindName(gk); got != want {
			t.Errorf("KindName(%v) = %s, want %s", gk, got, want)
		}
	}
}
