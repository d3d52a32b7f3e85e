package schemas

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"regexp"
	"time"
)

// KindRolloutRequest is the kind of an operator's rollout request.
const KindRolloutRequest = "RolloutRequest"

// SchemaRolloutRequest is the schema of a rollout request's file.
const SchemaRolloutRequest = "rollout-request.schema.json"

func init() { goTypes[SchemaRolloutRequest] = func() any { return new(RolloutRequest) } }

// RolloutRequestsDir is the directory of a rollout request's commit tree:
// rollouts/<channel>/<id>.json.
const RolloutRequestsDir = "rollouts"

// Actions of a rollout request (nuon rollout pause|resume|abort).
const (
	RolloutPause  = "pause"
	RolloutResume = "resume"
	RolloutAbort  = "abort"
)

// MaxRolloutRequestLife bounds a rollout request's deadline after it was
// made: a request is carried out at once or never.
const MaxRolloutRequestLife = time.Hour

// RolloutRequest is an operator's request to pause, resume or abort a
// channel's rollout. It is signed as a commit whose tree holds it alone
// (package requests, FileRollout), sent to the tenant server, and carried
// out as a decision on the channel's rollout ref that keeps it.
type RolloutRequest struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	ID         string `json:"id"`
	Channel    string `json:"channel"`
	// Action is RolloutPause, RolloutResume or RolloutAbort.
	Action    string    `json:"action"`
	Reason    string    `json:"reason,omitempty"`
	Requester string    `json:"requester"`
	Created   time.Time `json:"created"`
	Deadline  time.Time `json:"deadline"`
}

var channelName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// RolloutRequestPath is where request id for channel is in its commit.
func RolloutRequestPath(channel, id string) string {
	return path.Join(RolloutRequestsDir, channel, id+".json")
}

// Validate checks what a rollout request must hold.
func (r *RolloutRequest) Validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(r.APIVersion == APIVersion, "apiVersion must be %q, not %q", APIVersion, r.APIVersion)
	check(r.Kind == KindRolloutRequest, "kind must be %q, not %q", KindRolloutRequest, r.Kind)
	check(requestID.MatchString(r.ID), "id %q is not a request id (lower-case letters, digits and -, at most 63)", r.ID)
	check(channelName.MatchString(r.Channel), "channel %q is not a channel name", r.Channel)
	check(r.Action == RolloutPause || r.Action == RolloutResume || r.Action == RolloutAbort, "action %q is not pause, resume or abort", r.Action)
	check(len(r.Reason) <= 1024, "reason is longer than 1024 bytes")
	check(r.Requester != "", "requester is empty")
	check(!r.Created.IsZero() && r.Deadline.After(r.Created), "deadline %s is not after created %s", r.Deadline.Format(time.RFC3339), r.Created.Format(time.RFC3339))
	check(r.Deadline.Sub(r.Created) <= MaxRolloutRequestLife, "deadline %s is more than %s after created", r.Deadline.Format(time.RFC3339), MaxRolloutRequestLife)
	return errors.Join(errs...)
}

// DecodeRolloutRequest checks a rollout request file read from name
// (rollouts/<channel>/<id>.json) as DecodeRequest checks an install's:
// against its JSON Schema, strictly decoded, then Validate, and that the
// path names its channel and id. Every error wraps ErrInvalidRequest and
// names the file.
func DecodeRolloutRequest(name string, data []byte) (*RolloutRequest, error) {
	r, err := decodeRequestFile(name, SchemaRolloutRequest, data, (*RolloutRequest).Validate)
	if err != nil {
		return nil, err
	}
	if want := RolloutRequestPath(r.Channel, r.ID); name != want {
		return nil, fmt.Errorf("%w: %s: channel %q and id %q belong in %s", ErrInvalidRequest, name, r.Channel, r.ID, want)
	}
	return r, nil
}

// decodeRequestFile reads a signed request's file named name, of any
// kind: checked against its JSON Schema (problems with the file, field,
// line and column), decoded strictly as one document, then checked by
// validate for what the schema cannot say. Every error wraps
// ErrInvalidRequest and names the file.
func decodeRequestFile[T any](name, schema string, data []byte, validate func(*T) error) (*T, error) {
	if err := ValidateJSON(schema, data); err != nil {
		var ps Problems
		if errors.As(err, &ps) {
			for i := range ps {
				ps[i].File = name
			}
		}
		return nil, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	r := new(T)
	if err := dec.Decode(r); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidRequest, name, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: %s: data after the request", ErrInvalidRequest, name)
	}
	if err := validate(r); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidRequest, name, err)
	}
	return r, nil
}
