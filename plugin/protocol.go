package plugin

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"nuon.dev/nuon/internal/debugcmd"
	"nuon.dev/nuon/schemas"
)

// Protocol is the newest protocol version this side speaks; Protocols
// are all of them, newest first.
const Protocol = 1

// Protocols are the protocol versions this package speaks.
var Protocols = []int{Protocol}

// Exit codes of a plugin process. Whatever the code, a response with an
// error fails the operation; a non-zero code without a response fails it
// too, with the code's meaning.
const (
	// ExitOK: the response on stdout is the answer.
	ExitOK = 0
	// ExitFailed: the operation ran and failed; it may succeed later.
	ExitFailed = 1
	// ExitInvalid: the request could not be read or was wrong.
	ExitInvalid = 2
	// ExitUnsupported: the plugin has no such operation or protocol.
	ExitUnsupported = 3
	// ExitRefused: a debug command the plugin refuses.
	ExitRefused = 4
)

// exitCodes maps a response error code to its exit code.
var exitCodes = map[string]int{
	schemas.PluginFailed:      ExitFailed,
	schemas.PluginInvalid:     ExitInvalid,
	schemas.PluginUnsupported: ExitUnsupported,
	schemas.PluginRefused:     ExitRefused,
}

// ExitCode is the exit code a plugin ends with after it answered resp.
func ExitCode(resp *schemas.PluginResponse) int {
	if resp == nil || resp.Error == nil {
		return ExitOK
	}
	if c, ok := exitCodes[resp.Error.Code]; ok {
		return c
	}
	return ExitFailed
}

// exitMeaning says in words what a plugin's exit code means.
func exitMeaning(code int) string {
	switch code {
	case ExitOK:
		return "success"
	case ExitFailed:
		return "the operation failed"
	case ExitInvalid:
		return "the request was invalid"
	case ExitUnsupported:
		return "unsupported operation or protocol"
	case ExitRefused:
		return "refused"
	}
	return "an exit code the protocol does not define"
}

// Errors a job branches on. A plugin that breaks the protocol (no
// response, garbage, too much output, a protocol this side does not speak,
// a capability the job does not grant) fails with one of these and is
// not retried: running it again breaks the protocol again.
var (
	// ErrProtocol: the plugin's response breaks the protocol.
	ErrProtocol = errors.New("plugin broke the protocol")
	// ErrNoResponse: the plugin wrote nothing on stdout.
	ErrNoResponse = fmt.Errorf("%w: no response", ErrProtocol)
	// ErrTooLarge: the plugin wrote more than the response bound.
	ErrTooLarge = fmt.Errorf("%w: response too large", ErrProtocol)
	// ErrVersion: no protocol version both sides speak.
	ErrVersion = fmt.Errorf("%w: no common protocol version", ErrProtocol)
	// ErrNotGranted: the plugin needs a capability the job does not grant.
	ErrNotGranted = errors.New("capability not granted")
	// ErrUnsupported: the plugin does not implement the operation.
	ErrUnsupported = errors.New("operation not supported")
	// ErrFailed: the plugin's operation failed (the plugin said so).
	ErrFailed = errors.New("plugin operation failed")
	// ErrInvalid: the plugin found the request invalid.
	ErrInvalid = errors.New("plugin found the request invalid")
)

// Error is an operation a plugin answered with an error.
type Error struct {
	Plugin    string
	Operation string
	// Code is the response's error code (schemas.PluginFailed, …).
	Code    string
	Message string
	// Exit is the process's exit code.
	Exit int
}

func (e *Error) Error() string {
	return fmt.Sprintf("plugin %s %s: %s (%s, exit %d)", e.Plugin, e.Operation, e.Message, e.Code, e.Exit)
}

// Is lets callers branch on the code: ErrFailed, ErrInvalid,
// ErrUnsupported, and debugcmd.ErrRefused for a refused debug command.
func (e *Error) Is(target error) bool {
	switch e.Code {
	case schemas.PluginFailed:
		return target == ErrFailed
	case schemas.PluginInvalid:
		return target == ErrInvalid
	case schemas.PluginUnsupported:
		return target == ErrUnsupported
	case schemas.PluginRefused:
		return target == debugcmd.ErrRefused
	}
	return false
}

// ParseResponse reads a plugin's response to req: one JSON document that
// validates against schemas/plugin-response.schema.json, in the request's
// protocol version (on a handshake, one the request offered, with the
// plugin's manifest) and answering the request's operation. Its errors
// wrap ErrProtocol and say what is wrong, with line and column.
func ParseResponse(req *schemas.PluginRequest, data []byte) (*schemas.PluginResponse, error) {
	if len(strings.TrimSpace(string(data))) == 0 {
		return nil, ErrNoResponse
	}
	if err := schemas.ValidateJSON(schemas.SchemaPluginResponse, data); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrProtocol, err)
	}
	var resp schemas.PluginResponse
	if err := decodeStrict(data, &resp); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrProtocol, err)
	}
	if resp.Operation != req.Operation {
		return nil, fmt.Errorf("%w: response to %s, the request was %s", ErrProtocol, resp.Operation, req.Operation)
	}
	if req.Operation == schemas.PluginHandshake {
		return &resp, checkHandshake(req, &resp)
	}
	if resp.Protocol != req.Protocol {
		return nil, fmt.Errorf("%w: response in protocol %d, the request was in %d", ErrVersion, resp.Protocol, req.Protocol)
	}
	return &resp, nil
}

// checkHandshake checks that a handshake response names a protocol both
// sides speak, and the plugin's manifest.
func checkHandshake(req *schemas.PluginRequest, resp *schemas.PluginResponse) error {
	offered := req.Protocols
	if len(offered) == 0 {
		offered = []int{req.Protocol}
	}
	if resp.Plugin == nil {
		return fmt.Errorf("%w: the handshake response has no plugin manifest", ErrProtocol)
	}
	if !slices.Contains(offered, resp.Protocol) || !slices.Contains(resp.Plugin.Protocols, resp.Protocol) {
		return fmt.Errorf("%w: plugin %s speaks protocols %v and chose %d; this job speaks %v",
			ErrVersion, resp.Plugin.Name, resp.Plugin.Protocols, resp.Protocol, offered)
	}
	return nil
}

// Negotiate picks the newest protocol version both ours and theirs name,
// or 0.
func Negotiate(ours, theirs []int) int {
	best := 0
	for _, v := range ours {
		if v > best && slices.Contains(theirs, v) {
			best = v
		}
	}
	return best
}

// Missing lists the capabilities need asks that granted does not give,
// in words ("network", "env KUBECONFIG"); empty when all are granted.
func Missing(need, granted schemas.PluginCapabilities) []string {
	var out []string
	for _, c := range []struct {
		name       string
		need, have bool
	}{
		{"network", need.Network, granted.Network},
		{"secrets", need.Secrets, granted.Secrets},
		{"cloudRole", need.CloudRole, granted.CloudRole},
		{"writableState", need.WritableState, granted.WritableState},
	} {
		if c.need && !c.have {
			out = append(out, c.name)
		}
	}
	for _, e := range need.Env {
		if !slices.Contains(granted.Env, e) {
			out = append(out, "env "+e)
		}
	}
	return out
}

// Check tells whether a plugin whose manifest is m may run operation op
// with the capabilities granted: the operation is one it declares and it
// needs nothing that is not granted.
func Check(m *schemas.PluginManifest, op string, granted schemas.PluginCapabilities) error {
	if op != schemas.PluginHandshake && !slices.Contains(m.Operations, op) {
		return fmt.Errorf("plugin %s %s: %w (it declares %s)", m.Name, op, ErrUnsupported, strings.Join(m.Operations, ", "))
	}
	if miss := Missing(m.Capabilities, granted); len(miss) > 0 {
		return fmt.Errorf("plugin %s %s needs %s: %w by this job", m.Name, m.Version, strings.Join(miss, ", "), ErrNotGranted)
	}
	return nil
}

// nameRE is a plugin's name: a lower-case DNS label, as the manifest's
// schema says.
var nameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// ValidName tells whether name can name a plugin.
func ValidName(name string) bool { return nameRE.MatchString(name) }
