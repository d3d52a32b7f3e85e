package cli

import (
	"os"
	"path/filepath"

	"github.com/spf13/pflag"
)

// CustomerPolicyEnv names the customer's policy file when
// --customer-policy is not given.
const CustomerPolicyEnv = "NUON_CUSTOMER_POLICY"

// customerOptions are the agent's flags for the customer's own policy.
type customerOptions struct {
	policy string
}

func (c *customerOptions) flags(f *pflag.FlagSet) {
	f.StringVar(&c.policy, "customer-policy", "", "the customer's policy file (maintenance windows, hold, requests; in Kubernetes a mounted ConfigMap), read every pass: outside its windows or under its hold nothing is applied and the status says deferred; a missing or broken file holds (default $"+CustomerPolicyEnv+"; empty: no customer policy)")
}

// path is the policy file's absolute path: the flag, else the
// environment; "" for none.
func (c *customerOptions) path() (string, error) {
	p := c.policy
	if p == "" {
		p = os.Getenv(CustomerPolicyEnv)
	}
	if p == "" {
		return "", nil
	}
	return filepath.Abs(p)
}
