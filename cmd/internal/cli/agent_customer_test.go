package cli

import (
	"path/filepath"
	"testing"
)

// TestCustomerPolicyFlag: --customer-policy names the customer's policy
// file, $NUON_CUSTOMER_POLICY stands in for it, and neither means none.
func TestCustomerPolicyFlag(t *testing.T) {
	cmd := NewAgentCmd(&Globals{})
	if cmd.Flags().Lookup("customer-policy") == nil {
		t.Fatal("nuon agent has no --customer-policy flag")
	}
	for _, tc := range []struct {
		name, flag, env, want string
	}{
		{"none", "", "", ""},
		{"flag", "/etc/nuon/customer/policy.yaml", "", "/etc/nuon/customer/policy.yaml"},
		{"env", "", "/run/policy.yaml", "/run/policy.yaml"},
		{"flag wins", "/a.yaml", "/b.yaml", "/a.yaml"},
		{"relative", "policy.yaml", "", "policy.yaml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(CustomerPolicyEnv, tc.env)
			c := customerOptions{policy: tc.flag}
			got, err := c.path()
			if err != nil {
				t.Fatal(err)
			}
			want := tc.want
			if want != "" && !filepath.IsAbs(want) {
				want, _ = filepath.Abs(want)
			}
			if got != want {
				t.Errorf("path = %q, want %q", got, want)
			}
		})
	}
}
