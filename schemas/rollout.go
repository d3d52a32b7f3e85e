package schemas

// Rollout is a channel's rollout policy (channel.schema.json#/$defs/rollout):
// the ordered waves a change of the channel's pins reaches its installs in.
// Package rollout gives it its meaning: which install is in which wave,
// and (with the rollout controller) when a wave may start.
type Rollout struct {
	// Waves in the order they receive a change.
	Waves []RolloutWave `yaml:"waves" json:"waves"`
	// Deferred says how a wave treats its deferred installs (held by
	// their customer, waiting for a window) and unreachable ones;
	// absent: the defaults of RolloutDeferred.
	Deferred *RolloutDeferred `yaml:"deferred,omitempty" json:"deferred,omitempty"`
}

// RolloutWave is one wave: a label selector, a share of the channel's
// installs, or both (a share of the installs the selector matches).
type RolloutWave struct {
	// Name names the wave in output; default wave-N, N counted from 1.
	Name string `yaml:"name,omitempty" json:"name,omitempty"`
	// Selector picks installs by their labels.
	Selector *LabelSelector `yaml:"selector,omitempty" json:"selector,omitempty"`
	// Count, Percent and Rest are the wave's share; at most one is set.
	Count   int  `yaml:"count,omitempty" json:"count,omitempty"`
	Percent int  `yaml:"percent,omitempty" json:"percent,omitempty"`
	Rest    bool `yaml:"rest,omitempty" json:"rest,omitempty"`
	// AllowEmpty lets a selector wave match no install of the channel.
	AllowEmpty bool `yaml:"allowEmpty,omitempty" json:"allowEmpty,omitempty"`
	// Bake is how long the wave's installs run the new version, healthy,
	// before the next wave starts; a Go duration, default 0s.
	Bake string `yaml:"bake,omitempty" json:"bake,omitempty"`
	// MinHealthy is how many healthy reports of the new version the wave
	// needs at least, deferred installs notwithstanding; default 1.
	MinHealthy *int `yaml:"minHealthy,omitempty" json:"minHealthy,omitempty"`
	// FailureBudget is how many of the wave's installs may fail before
	// OnFailure applies; default 0.
	FailureBudget int `yaml:"failureBudget,omitempty" json:"failureBudget,omitempty"`
	// OnFailure is halt or rollback; default halt.
	OnFailure string `yaml:"onFailure,omitempty" json:"onFailure,omitempty"`
}

// RolloutDeferred is what a wave does about installs that cannot take the
// change yet: deferred by their customer, or unreachable.
type RolloutDeferred struct {
	// Wait is how long a wave waits for them, a Go duration.
	Wait string `yaml:"wait,omitempty" json:"wait,omitempty"`
	// Then is proceed (the next wave starts without them) or halt, once
	// Wait has passed.
	Then string `yaml:"then,omitempty" json:"then,omitempty"`
}

// LabelSelector is a Kubernetes label selector: every matchLabels entry
// and every matchExpressions requirement must hold.
type LabelSelector struct {
	MatchLabels      map[string]string          `yaml:"matchLabels,omitempty" json:"matchLabels,omitempty"`
	MatchExpressions []LabelSelectorRequirement `yaml:"matchExpressions,omitempty" json:"matchExpressions,omitempty"`
}

// LabelSelectorRequirement is one matchExpressions entry: key, an
// operator (In, NotIn, Exists, DoesNotExist) and values.
type LabelSelectorRequirement struct {
	Key      string   `yaml:"key" json:"key"`
	Operator string   `yaml:"operator" json:"operator"`
	Values   []string `yaml:"values,omitempty" json:"values,omitempty"`
}
