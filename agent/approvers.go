package agent

import (
	"fmt"
	"sync"

	"nuon.dev/nuon/policy"
	"nuon.dev/nuon/trust"
)

// rootApprovers keeps the approvers read from one version of the trust
// root the agent holds.
type rootApprovers struct {
	mu   sync.Mutex
	root *trust.Root
	as   *policy.Approvers
	err  error
}

// approvers returns the keys that approve plans now. When the trust root
// the agent holds defines the approvers role, that role's keys (the
// root's render and operators keys, and the request keys the agent
// trusts, never approve); else Config.Approvers (--approval-trust, the
// form before the root). The root is the one place for trust: a vendor
// rotates or revokes an approver there, and every agent that follows the
// root follows it, with no file changed in the install. A root whose
// approvers cannot be read trusts no approver, and says why.
func (a *Agent) approvers() (*policy.Approvers, error) {
	root := a.Root()
	if root == nil || root.Role(trust.RoleApprovers) == nil {
		return a.cfg.Approvers, nil
	}
	c := &a.rootApprovers
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.root != root {
		c.root = root
		c.as, c.err = a.readRootApprovers(root)
	}
	return c.as, c.err
}

func (a *Agent) readRootApprovers(root *trust.Root) (*policy.Approvers, error) {
	// A key's window and revocation are folded into the file's
	// notBefore/notAfter, judged again at each approval's time.
	data, err := root.RoleFile(trust.RoleApprovers, a.cfg.Now())
	if err != nil {
		return nil, err
	}
	as, err := policy.ParseApprovers(root.File+" (approvers role)", data)
	if err != nil {
		return nil, fmt.Errorf("the approvers role of %s: %w", root.File, err)
	}
	as.ExcludeRoot(root)
	if a.cfg.RequestTrust != nil {
		for _, s := range a.cfg.RequestTrust.Signers {
			as.Exclude("request", s.Key)
		}
	}
	return as, nil
}
