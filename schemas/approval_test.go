package schemas

import (
	"errors"
	"strings"
	"testing"
)

func TestApprovalNeeds(t *testing.T) {
	sum := func(kinds ...string) PlanSummary {
		s := PlanSummary{Counts: map[string]int{}}
		for _, k := range kinds {
			s.Counts[k]++
		}
		return s
	}
	tests := []struct {
		name     string
		settings *ApprovalSettings
		sum      PlanSummary
		want     bool
	}{
		{"default no-op", nil, sum(), false},
		{"default create", nil, sum(ChangeCreate), false},
		{"default update and create", nil, sum(ChangeCreate, ChangeUpdate), false},
		{"default delete", nil, sum(ChangeDelete), true},
		{"default replace among creates", nil, sum(ChangeCreate, ChangeReplace), true},
		{"manual create", &ApprovalSettings{Mode: ApprovalManual}, sum(ChangeCreate), true},
		{"manual no-op never waits", &ApprovalSettings{Mode: ApprovalManual}, sum(), false},
		{"create not auto-approved", &ApprovalSettings{AutoApprove: []string{ChangeUpdate}}, sum(ChangeCreate), true},
		{"require wins over autoApprove", &ApprovalSettings{AutoApprove: []string{ChangeCreate, ChangeDelete}, Require: []string{ChangeDelete}}, sum(ChangeDelete), true},
		{"empty require lets delete through when auto-approved", &ApprovalSettings{AutoApprove: []string{ChangeDelete}, Require: []string{}}, sum(ChangeDelete), false},
		{"empty require, delete not auto-approved", &ApprovalSettings{Require: []string{}}, sum(ChangeDelete), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, why := tt.settings.Needs(tt.sum)
			if got != tt.want || got != (why != "") {
				t.Errorf("Needs = %v (%q), want %v", got, why, tt.want)
			}
		})
	}
}

func TestDecodeApproval(t *testing.T) {
	const good = `{"apiVersion":"nuon.dev/v1","kind":"Approval","install":"acme","component":"db","plan":"sha256:` +
		`aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","decision":"approve","approver":"alice",` +
		`"created":"2030-01-01T00:00:00Z","expires":"2030-01-02T00:00:00Z"}`
	if a, err := DecodeApproval([]byte(good)); err != nil || a.Plan[:7] != "sha256:" {
		t.Fatalf("good approval: %v", err)
	}
	for name, data := range map[string]string{
		"unknown field":     strings.Replace(good, `"approver"`, `"extra":1,"approver"`, 1),
		"short hash":        strings.Replace(good, "aaaaaaaa", "", 1),
		"expires first":     strings.Replace(good, "2030-01-02", "2029-01-02", 1),
		"trailing data":     good + "{}",
		"unknown decision":  strings.Replace(good, `"approve"`, `"maybe"`, 1),
		"too large":         good + strings.Repeat(" ", maxApproval),
		"another kind":      strings.Replace(good, `"Approval"`, `"Request"`, 1),
		"not an install id": strings.Replace(good, `"acme"`, `"Acme!"`, 1),
	} {
		if _, err := DecodeApproval([]byte(data)); !errors.Is(err, ErrInvalidApproval) {
			t.Errorf("%s: error %v, want ErrInvalidApproval", name, err)
		}
	}
}

func FuzzDecodeApproval(f *testing.F) {
	f.Add([]byte(`{"apiVersion":"nuon.dev/v1","kind":"Approval"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := DecodeApproval(data)
		if err == nil && (!ValidPlanHash(a.Plan) || !a.Expires.After(a.Created)) {
			t.Fatalf("accepted %q", data)
		}
	})
}
