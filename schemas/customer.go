package schemas

import "time"

// KindCustomerPolicy is the kind of the customer's policy file.
const KindCustomerPolicy = "CustomerPolicy"

// CustomerPolicy is the customer's policy file: the customer's own rules
// for changes to the install, read by the agent from inside the install
// (customer-policy.schema.json; package policy gives it meaning).
type CustomerPolicy struct {
	APIVersion string `yaml:"apiVersion" json:"apiVersion"`
	Kind       string `yaml:"kind" json:"kind"`
	// Timezone is the IANA time zone of every window that names none.
	Timezone string `yaml:"timezone,omitempty" json:"timezone,omitempty"`
	// Allow are the windows in which changes may be applied; none means
	// any time no deny window covers.
	Allow []CustomerWindow `yaml:"allow,omitempty" json:"allow,omitempty"`
	// Deny are the windows in which no change is applied; deny wins.
	Deny []CustomerWindow `yaml:"deny,omitempty" json:"deny,omitempty"`
	// Hold, while present, stops every change.
	Hold *CustomerHold `yaml:"hold,omitempty" json:"hold,omitempty"`
	// Requests false refuses the vendor's read-only requests; nil allows
	// them.
	Requests *bool `yaml:"requests,omitempty" json:"requests,omitempty"`
	// Approvers are the customer's approval keys, pinned in the install.
	Approvers []CustomerApprover `yaml:"approvers,omitempty" json:"approvers,omitempty"`
	// RequireApproval names the changes that need one of Approvers'
	// approval, in addition to the vendor's.
	RequireApproval *CustomerRequire `yaml:"requireApproval,omitempty" json:"requireApproval,omitempty"`
}

// CustomerRequire names the changes that need the customer's own
// approval: of Components (none: every component), the plans that make
// any of Changes (none: any change; a no-op never waits).
type CustomerRequire struct {
	Components []string `yaml:"components,omitempty" json:"components,omitempty"`
	Changes    []string `yaml:"changes,omitempty" json:"changes,omitempty"`
}

// CustomerWindow is one maintenance window: weekly (Days and Start) or
// Cron, open for Duration after each start, in Timezone.
type CustomerWindow struct {
	Name     string   `yaml:"name,omitempty" json:"name,omitempty"`
	Days     []string `yaml:"days,omitempty" json:"days,omitempty"`
	Start    string   `yaml:"start,omitempty" json:"start,omitempty"`
	Cron     string   `yaml:"cron,omitempty" json:"cron,omitempty"`
	Duration string   `yaml:"duration" json:"duration"`
	Timezone string   `yaml:"timezone,omitempty" json:"timezone,omitempty"`
}

// CustomerHold stops every change until the customer removes it.
type CustomerHold struct {
	Reason string `yaml:"reason" json:"reason"`
}

// CustomerApprover is one of the customer's approval keys.
type CustomerApprover struct {
	Name string `yaml:"name" json:"name"`
	// Key is an OpenSSH public key (authorized_keys form).
	Key string `yaml:"key" json:"key"`
}

// Reasons an install defers a change (Deferred.Reason).
const (
	// DeferredHold: the customer's policy holds every change, or cannot
	// be read (the agent then holds too, and the message says why).
	DeferredHold = "hold"
	// DeferredWindow: no maintenance window of the customer's policy is
	// open; Until says when the next one opens, when known.
	DeferredWindow = "window"
	// DeferredApproval is reserved for a change that waits for a signed
	// approval of its plan.
	DeferredApproval = "approval"
	// DeferredCustomerApproval: a change waits for the customer's own
	// approval of its plan (the customer's policy requires it).
	DeferredCustomerApproval = "customer-approval"
)

// Deferred says the install holds a change back on purpose: the change is
// not applied, and it has not failed. The rollout controller counts such
// an install as deferred, apart from failures.
type Deferred struct {
	// Reason is one of the Deferred… constants.
	Reason string `json:"reason"`
	// Message says why, for a person.
	Message string `json:"message"`
	// Since is when the install began to defer for this reason.
	Since time.Time `json:"since"`
	// Until is when the change may go ahead, when known: the opening of
	// the next maintenance window.
	Until *time.Time `json:"until,omitempty"`
	// Commit is the desired commit held back.
	Commit string `json:"commit"`
}

// Equal reports whether d and e defer the same change for the same
// reason, message and end (Since aside).
func (d *Deferred) Equal(e *Deferred) bool {
	if d == nil || e == nil {
		return d == e
	}
	sameUntil := d.Until == nil && e.Until == nil || d.Until != nil && e.Until != nil && d.Until.Equal(*e.Until)
	return d.Reason == e.Reason && d.Message == e.Message && d.Commit == e.Commit && sameUntil
}
