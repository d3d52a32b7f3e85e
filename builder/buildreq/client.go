package buildreq

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/internal/signature/request"
	"nuon.dev/nuon/schemas"
)

// Path is where the tenant server serves builds (server.BuildsPath).
const Path = "/builds"

// Client speaks to the tenant server's build endpoints, every request
// signed with Key: vendor CI files requests and reads their state; a
// build agent takes them and answers.
type Client struct {
	// Server is the tenant server's base URL.
	Server string
	http   *http.Client
}

// NewClient signs every request with key under KeyID(key).
func NewClient(server string, key *signature.Signer) *Client {
	s := &request.Signer{Install: KeyID(key.PublicKey()), Key: key}
	return &Client{Server: strings.TrimSuffix(server, "/"), http: &http.Client{Transport: s.Transport(nil)}}
}

// ErrServer marks a refusal by the server: its message says why. The
// error is a *ServerError.
var ErrServer = errors.New("refused by the server")

// ServerError is an answer of the server other than success.
type ServerError struct {
	Code    int
	Message string
}

func (e *ServerError) Error() string {
	return fmt.Sprintf("%v (%d): %s", ErrServer, e.Code, e.Message)
}

// Is makes errors.Is(err, ErrServer) hold.
func (e *ServerError) Is(target error) bool { return target == ErrServer }

// Final reports whether err is the server's final word on a request
// (4xx: refused, unknown, not yours): trying again will not help, unlike
// a network error or a 5xx of a server that is restarting.
func Final(err error) bool {
	var se *ServerError
	return errors.As(err, &se) && se.Code >= 400 && se.Code < 500 && se.Code != http.StatusTooManyRequests && se.Code != http.StatusRequestTimeout
}

// File files a signed build request and returns its state.
func (c *Client) File(ctx context.Context, sub schemas.SignedBuildRequest) (*schemas.BuildStatus, error) {
	var st schemas.BuildStatus
	if _, err := c.do(ctx, http.MethodPost, Path+"/requests", sub, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// Status reads a request's state, waiting up to waitSeconds for it to
// finish.
func (c *Client) Status(ctx context.Context, id string, waitSeconds int) (*schemas.BuildStatus, error) {
	var st schemas.BuildStatus
	if _, err := c.do(ctx, http.MethodGet, fmt.Sprintf("%s/requests/%s?wait=%d", Path, id, waitSeconds), nil, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// Next takes the next build request under a lease of leaseSeconds,
// waiting up to waitSeconds; nil when none came.
func (c *Client) Next(ctx context.Context, waitSeconds, leaseSeconds int) (*schemas.SignedBuildRequest, error) {
	var sub schemas.SignedBuildRequest
	code, err := c.do(ctx, http.MethodPost, fmt.Sprintf("%s/next?wait=%d&lease=%d", Path, waitSeconds, leaseSeconds), struct{}{}, &sub)
	if err != nil || code == http.StatusNoContent {
		return nil, err
	}
	return &sub, nil
}

// Lease renews the lease on a request being built and reports its phase.
func (c *Client) Lease(ctx context.Context, id, phase string) (*schemas.BuildStatus, error) {
	var st schemas.BuildStatus
	if _, err := c.do(ctx, http.MethodPost, Path+"/requests/"+id+"/lease", schemas.BuildProgress{Phase: phase}, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// Answer reports a taken request's outcome.
func (c *Client) Answer(ctx context.Context, id string, out schemas.BuildOutcome) error {
	_, err := c.do(ctx, http.MethodPost, Path+"/requests/"+id+"/result", out, nil)
	return err
}

func (c *Client) do(ctx context.Context, method, path string, in, out any) (int, error) {
	var body io.Reader
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return 0, err
		}
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.Server+path, body)
	if err != nil {
		return 0, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return resp.StatusCode, err
	}
	if resp.StatusCode >= 300 {
		return resp.StatusCode, &ServerError{Code: resp.StatusCode, Message: strings.TrimSpace(strings.TrimPrefix(string(data), "nuon: "))}
	}
	if out != nil && resp.StatusCode != http.StatusNoContent {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s %s: %w", method, path, err)
		}
	}
	return resp.StatusCode, nil
}
