package schemas

import "time"

// KindRolloutState is the kind of rollout.json on a rollout ref.
const KindRolloutState = "RolloutState"

// SchemaRolloutState is the schema of rollout.json.
const SchemaRolloutState = "rollout-state.schema.json"

func init() { goTypes[SchemaRolloutState] = func() any { return new(RolloutState) } }

// RolloutRefPrefix + channel is the channel's rollout ref: one commit per
// decision of the rollout controller, signed by the tenant server's render
// key, whose tree holds RolloutStateFile. Only the server writes it; an
// install's key may not.
const RolloutRefPrefix = "refs/heads/nuon/rollouts/"

// RolloutRef is the rollout ref of channel.
func RolloutRef(channel string) string { return RolloutRefPrefix + channel }

// RolloutStateFile is the RolloutState in a rollout commit's tree.
const RolloutStateFile = "rollout.json"

// Phases of a rollout (RolloutState.Phase).
const (
	// RolloutRunning: waves open one after another as they prove healthy.
	RolloutRunning = "running"
	// RolloutHalted: a wave failed (or waited too long for deferred
	// installs); no further wave opens until the pins change or an
	// operator resumes it. Opened installs keep what they have.
	RolloutHalted = "halted"
	// RolloutRolledBack: halted, and the failing wave's installs went
	// back to the version that was healthy on them (Rollback).
	RolloutRolledBack = "rolled-back"
	// RolloutFinished: every wave opened and passed; the To pins are the
	// channel's.
	RolloutFinished = "finished"
	// RolloutPaused: an operator paused it (nuon rollout pause): no wave
	// opens or is judged until one resumes it. Opened installs keep what
	// they have.
	RolloutPaused = "paused"
	// RolloutAborted: an operator aborted it (nuon rollout abort): no
	// wave opens again; every install keeps the pins it has. Only a new
	// pin on main starts a new rollout.
	RolloutAborted = "aborted"
)

// Decisions of the rollout controller (RolloutDecision.Kind).
const (
	// DecisionBaseline records the channel's pins the first time the
	// controller sees a channel with a rollout policy: nothing moves.
	DecisionBaseline = "baseline"
	// DecisionStarted opens the first wave of a new rollout.
	DecisionStarted = "started"
	// DecisionPassed records a wave proven healthy and opens the next.
	DecisionPassed = "passed"
	// DecisionHalted stops the rollout on failures (or deferred installs).
	DecisionHalted = "halted"
	// DecisionRolledBack halts and rolls the failing wave back.
	DecisionRolledBack = "rolled-back"
	// DecisionFinished records the last wave proven healthy.
	DecisionFinished = "finished"
	// DecisionPaused, DecisionResumed and DecisionAborted are an
	// operator's signed requests (RolloutDecision.Request names it).
	DecisionPaused  = "paused"
	DecisionResumed = "resumed"
	DecisionAborted = "aborted"
)

// RolloutState is rollout.json, the state of a channel's current rollout
// as of one decision (rollout-state.schema.json; package rollout gives it
// meaning). A render reads it to give each install of the channel its
// pins: To to the installs of the opened waves, Rollback's to the rolled
// back ones, the from-pins to the others.
type RolloutState struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Channel    string `json:"channel"`
	// Rollout counts the channel's rollouts from 1 (0 for the baseline).
	Rollout int `json:"rollout"`
	// Source is the main commit whose pins started the rollout.
	Source string `json:"source,omitempty"`
	Phase  string `json:"phase"`
	// From are the pins the installs had before the rollout; FromInstalls
	// those of installs that had other pins (a rollout superseded in its
	// middle), by install.
	From         map[string]string            `json:"from"`
	FromInstalls map[string]map[string]string `json:"fromInstalls,omitempty"`
	// To are the pins the rollout brings.
	To map[string]string `json:"to"`
	// Waves are the rollout's waves, in order; Opened ones name their
	// installs.
	Waves []RolloutWaveState `json:"waves"`
	// Rollback are the pins of rolled back installs, by install.
	Rollback map[string]map[string]string `json:"rollback,omitempty"`
	// Decision is the decision that wrote this state.
	Decision RolloutDecision `json:"decision"`
}

// RolloutWaveState is one wave of a rollout.
type RolloutWaveState struct {
	Name string `json:"name"`
	// Installs are the wave's installs, sorted, once it opened.
	Installs []string `json:"installs,omitempty"`
	// Size is the number of installs Assign put in the wave when the
	// rollout started.
	Size   int        `json:"size"`
	Opened *time.Time `json:"opened,omitempty"`
	Passed *time.Time `json:"passed,omitempty"`
}

// RolloutDecision is one decision and its evidence.
type RolloutDecision struct {
	Kind string `json:"kind"`
	// Wave is the number of the wave decided on, from 1; 0 for none.
	Wave int       `json:"wave"`
	At   time.Time `json:"at"`
	// By is who decided: "controller", or an operator's key.
	By     string `json:"by"`
	Reason string `json:"reason"`
	// Evidence are the installs' statuses the decision rests on.
	Evidence []RolloutEvidence `json:"evidence,omitempty"`
	// Request is the operator's signed request a pause, resume or abort
	// carries out.
	Request *RolloutRequestRef `json:"request,omitempty"`
}

// RolloutRequestRef names an operator's rollout request in the decision
// that carried it out: the request's id, the key that signed it (its
// principal and requests.KeyID), and the request commit, whose file and
// raw bytes are kept so that anyone can verify the signature again.
type RolloutRequestRef struct {
	ID        string `json:"id"`
	Principal string `json:"principal"`
	Key       string `json:"key"`
	Commit    string `json:"commit"`
	// Signed is the request as the operator signed it.
	Signed SignedRequest `json:"signed"`
}

// Outcomes of an install in a wave (RolloutEvidence.Outcome).
const (
	OutcomeHealthy  = "healthy"
	OutcomeFailed   = "failed"
	OutcomeDeferred = "deferred"
	OutcomeWaiting  = "waiting"
)

// RolloutEvidence is one install's part in a decision.
type RolloutEvidence struct {
	Install string `json:"install"`
	// Status is the status commit, signed by the install's key.
	Status string `json:"status,omitempty"`
	// Desired is the desired commit the status names.
	Desired string `json:"desired,omitempty"`
	Outcome string `json:"outcome"`
	// Reason says why failed or deferred: the failing components' errors,
	// the hold, unreachable.
	Reason string `json:"reason,omitempty"`
}
