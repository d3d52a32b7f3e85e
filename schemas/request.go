package schemas

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"
	"time"
)

// KindRequest is the kind of a Request.
const KindRequest = "Request"

// RequestsDir is the folder on main that holds requests, one
// requests/<install>/<id>.json per request.
const RequestsDir = "requests"

// RequestsFile is where an install's pending requests are in its
// rendered tree (a JSON array of Request).
const RequestsFile = "requests.json"

// Request is an operator's request to one install: the logs of a
// component, or one allow-listed, read-only debug command. It is filed as
// requests/<install>/<id>.json on main in a commit signed by an operator
// key trusted for requests; Requester is that key's principal.
type Request struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	ID         string `json:"id"`
	Install    string `json:"install"`
	// Type is RequestLogs or RequestDebug.
	Type      string    `json:"type"`
	Component string    `json:"component,omitempty"`
	Requester string    `json:"requester"`
	Created   time.Time `json:"created"`
	// Deadline: after it the agent refuses the request as expired.
	Deadline time.Time `json:"deadline"`
	// Logs bounds a logs request.
	Logs *LogsRequest `json:"logs,omitempty"`
	// Command is a debug request's words.
	Command []string `json:"command,omitempty"`
}

// LogsRequest bounds a logs request.
type LogsRequest struct {
	// Since is how far back, as a Go duration; default all the plugin
	// keeps.
	Since string `json:"since,omitempty"`
	// Tail is at most this many lines; default all within the answer's
	// byte bound.
	Tail int `json:"tail,omitempty"`
}

// KindInstallRequests is the kind of an InstallRequests.
const KindInstallRequests = "InstallRequests"

// InstallRequests is installs/<id>/requests.json in the rendered tree: the
// install's pending requests, sorted by id. The renderer writes it only
// when there is at least one.
type InstallRequests struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Requests   []SignedRequest `json:"requests"`
}

// SignedRequest is one entry of an install's rendered requests.json: the
// request file as filed and the raw commit that filed it, signed by the
// operator. It carries its own proof, so the agent checks the requester's
// signature too (package requests), not only the renderer's.
type SignedRequest struct {
	// File is the request file's content, exactly as committed.
	File string `json:"file"`
	// Commit is the filing commit's raw object (headers, gpgsig and
	// message), whose trailers pin File's path and SHA-256.
	Commit string `json:"commit"`
}

// MaxRequestLife bounds a request's deadline after it was made: the
// renderer looks back no further for pending ones.
const MaxRequestLife = 24 * time.Hour

// ErrInvalidRequest marks a request file that is malformed: it is dropped,
// never retried.
var ErrInvalidRequest = errors.New("invalid request")

var requestID = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// RequestPath is where request id for install is on main.
func RequestPath(install, id string) string {
	return path.Join(RequestsDir, install, id+".json")
}

// DecodeRequest checks a request file read from name (its path on main,
// requests/<install>/<id>.json) against its JSON Schema, decodes it
// strictly, and checks that the path names the same install and id. Every
// error wraps ErrInvalidRequest and names the file.
func DecodeRequest(name string, data []byte) (*Request, error) {
	r, err := decodeRequestFile(name, SchemaRequest, data, (*Request).Validate)
	if err != nil {
		return nil, err
	}
	if want := RequestPath(r.Install, r.ID); name != want {
		return nil, fmt.Errorf("%w: %s: install %q and id %q belong in %s", ErrInvalidRequest, name, r.Install, r.ID, want)
	}
	return r, nil
}

// Validate checks what the renderer and the agent rely on, whatever the
// schema says.
func (r *Request) Validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(r.APIVersion == APIVersion, "apiVersion must be %q, not %q", APIVersion, r.APIVersion)
	check(r.Kind == KindRequest, "kind must be %q, not %q", KindRequest, r.Kind)
	check(requestID.MatchString(r.ID), "id %q is not a request id (lower-case letters, digits and -, at most 63)", r.ID)
	check(r.Install != "" && !strings.ContainsAny(r.Install, "/\\\x00") && r.Install != "." && r.Install != "..", "install %q is not an install id", r.Install)
	check(r.Requester != "", "requester is empty")
	check(!r.Created.IsZero() && r.Deadline.After(r.Created), "deadline %s is not after created %s", r.Deadline.Format(time.RFC3339), r.Created.Format(time.RFC3339))
	check(r.Deadline.Sub(r.Created) <= MaxRequestLife, "deadline %s is more than %s after created", r.Deadline.Format(time.RFC3339), MaxRequestLife)
	switch r.Type {
	case RequestLogs:
		check(len(r.Command) == 0, "a logs request takes no command")
		if r.Logs != nil {
			if r.Logs.Since != "" {
				d, err := time.ParseDuration(r.Logs.Since)
				check(err == nil && d > 0, "logs.since %q is not a positive duration such as 1h", r.Logs.Since)
			}
			check(r.Logs.Tail >= 0, "logs.tail %d is negative", r.Logs.Tail)
		}
	case RequestDebug:
		check(len(r.Command) > 0, "a debug request has no command")
		check(r.Logs == nil, "a debug request takes no logs bounds")
	default:
		check(false, "type must be %s or %s, not %q", RequestLogs, RequestDebug, r.Type)
	}
	return errors.Join(errs...)
}

// Expired tells whether r is past its deadline at now.
func (r *Request) Expired(now time.Time) bool { return !now.Before(r.Deadline) }
