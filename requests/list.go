package requests

import (
	"time"

	"nuon.dev/nuon/schemas"
)

// Listed is one request and where it stands, as `nuon requests` shows it.
type Listed struct {
	ID        string    `json:"id"`
	Install   string    `json:"install"`
	Type      string    `json:"type"`
	Component string    `json:"component,omitempty"`
	Command   []string  `json:"command,omitempty"`
	Requester string    `json:"requester"`
	Created   time.Time `json:"created"`
	Deadline  time.Time `json:"deadline"`
	// State is pending, answered, refused or expired.
	State string `json:"state"`
	// Reason says why it was refused: by the renderer (it does not
	// verify) or by the agent.
	Reason string `json:"reason,omitempty"`
	// Answer is the answer's path in the install's status tree.
	Answer string `json:"answer,omitempty"`
	Commit string `json:"commit"`
}

// List says where each filed request stands: refused when it does not
// verify (the renderer drops it), answered or refused as the install's
// status says, expired when its deadline passed unanswered, else pending.
// status returns an install's latest status, nil when it has none.
func List(filed []Filed, status func(install string) *schemas.Status, now time.Time) []Listed {
	out := []Listed{}
	for _, f := range filed {
		if f.Request == nil {
			continue
		}
		r := f.Request
		l := Listed{ID: r.ID, Install: r.Install, Type: r.Type, Component: r.Component, Command: r.Command,
			Requester: r.Requester, Created: r.Created, Deadline: r.Deadline, Commit: f.Commit.String()}
		switch st := status(r.Install); {
		case f.Err != nil:
			l.State, l.Reason = schemas.RequestRefused, "dropped by the renderer: "+f.Err.Error()
		case st != nil && st.Requests[r.ID].State != "":
			rs := st.Requests[r.ID]
			l.State, l.Reason, l.Answer = rs.State, rs.Reason, rs.Answer
		case r.Expired(now):
			l.State = schemas.RequestExpired
		default:
			l.State = schemas.RequestPending
		}
		out = append(out, l)
	}
	return out
}
