package gitproto

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
)

// Content types of smart HTTP (gitprotocol-http).
const (
	typeAdvertisement        = "application/x-git-upload-pack-advertisement"
	typeRequest              = "application/x-git-upload-pack-request"
	typeResult               = "application/x-git-upload-pack-result"
	typeReceiveAdvertisement = "application/x-git-receive-pack-advertisement"
	typeReceiveRequest       = "application/x-git-receive-pack-request"
	typeReceiveResult        = "application/x-git-receive-pack-result"
)

// httpTransport is smart HTTP: each request is a POST whose response
// carries the whole answer (stateless-rpc).
type httpTransport struct{ c *Client }

var _ transport = (*httpTransport)(nil)

func (t *httpTransport) host() string {
	u, err := url.Parse(t.c.URL)
	if err != nil {
		return ""
	}
	return u.Host
}

// uploadPack posts the version 2 command. With Client.Discover, or when the
// command fails the way a server without version 2 makes it fail, it GETs
// the advertisement first; a version 0 advertisement switches to call.v0.
func (t *httpTransport) uploadPack(ctx context.Context, call *uploadCall) error {
	c := t.c
	if c.Discover {
		_, adv, err := t.discover(ctx)
		if adv != nil {
			return t.v0(ctx, call, adv)
		}
		if err != nil {
			return fmt.Errorf("capabilities: %w", err)
		}
	}
	body, err := call.request()
	if err != nil {
		return err
	}
	err = t.post(ctx, "/git-upload-pack", typeRequest, typeResult, body, call.read)
	if err == nil {
		c.stats.version.Store(2)
	}
	if err != nil && c.caps.Load() == nil && explainable(err) && ctx.Err() == nil {
		_, adv, cerr := t.discover(ctx)
		if adv != nil {
			return t.v0(ctx, call, adv)
		}
		if errors.Is(cerr, ErrUnsupported) {
			return fmt.Errorf("capabilities: %w", cerr)
		}
	}
	return err
}

func (t *httpTransport) v0(ctx context.Context, call *uploadCall, adv *v0Advertisement) error {
	if call.v0 == nil {
		return fmt.Errorf("capabilities: %w: it answered in protocol version 0", ErrUnsupported)
	}
	t.c.fallback(t.host())
	return call.v0(ctx, adv, httpRoundTripper{t})
}

// httpRoundTripper posts version 0 upload-pack requests.
type httpRoundTripper struct{ t *httpTransport }

func (rt httpRoundTripper) roundTrip(ctx context.Context, body []byte, read func(*pktReader) error) error {
	return rt.t.post(ctx, "/git-upload-pack", typeRequest, typeResult, body, read)
}

// receivePack posts the push. git's http-backend runs receive-pack without
// the advertisement, and the agent knows the old values of the refs it
// moves, so only Client.Discover GETs it (all refs: the cost of a version 0
// poll).
func (t *httpTransport) receivePack(ctx context.Context, call *pushCall) error {
	var adv *v0Advertisement
	if t.c.Discover {
		req, err := t.get(ctx, "git-receive-pack")
		if err != nil {
			return err
		}
		err = t.c.do(req, typeReceiveAdvertisement, func(p *pktReader) error {
			var err error
			_, adv, err = readOpening(p, "git-receive-pack")
			if err == nil && adv == nil {
				err = protocolErrorf("receive-pack answered in protocol version 2")
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("receive-pack advertisement: %w", err)
		}
	}
	body, err := call.request(adv)
	if err != nil {
		return err
	}
	return t.post(ctx, "/git-receive-pack", typeReceiveRequest, typeReceiveResult, body, call.read)
}

// post sends one request to a service and hands its response to read.
func (t *httpTransport) post(ctx context.Context, service, contentType, accept string, body []byte, read func(*pktReader) error) error {
	u, err := t.endpoint(service)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", contentType)
	t.c.stats.sent.Add(int64(len(body)))
	return t.c.do(req, accept, read)
}

// get is the GET of a service's advertisement.
func (t *httpTransport) get(ctx context.Context, service string) (*http.Request, error) {
	u, err := t.endpoint("/info/refs")
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u+"?service="+service, nil)
	if err != nil {
		return nil, err
	}
	// As git does, so that no proxy answers from a cache.
	req.Header.Set("Pragma", "no-cache")
	return req, nil
}

// discover GETs upload-pack's advertisement: the capabilities of a
// version 2 server (cached), or the refs of a version 0 one.
func (t *httpTransport) discover(ctx context.Context) (Capabilities, *v0Advertisement, error) {
	c := t.c
	if caps := c.caps.Load(); caps != nil {
		return *caps, nil, nil
	}
	req, err := t.get(ctx, "git-upload-pack")
	if err != nil {
		return nil, nil, err
	}
	var caps Capabilities
	var adv *v0Advertisement
	err = c.do(req, typeAdvertisement, func(p *pktReader) error {
		caps, adv, err = readOpening(p, "git-upload-pack")
		return err
	})
	if err != nil || adv != nil {
		return nil, adv, err
	}
	if err := checkCapabilities(caps); err != nil {
		return nil, nil, err
	}
	c.caps.Store(&caps)
	return caps, nil, nil
}

// do sends req with the protocol headers, checks the status and content
// type, and hands the body to read. It drains what read leaves so the
// connection can be reused.
func (c *Client) do(req *http.Request, contentType string, read func(*pktReader) error) error {
	req.Header.Set("Accept", contentType)
	req.Header.Set("Git-Protocol", "version=2")
	req.Header.Set("User-Agent", userAgent)
	if c.Auth != nil {
		c.Auth(req)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	c.stats.exchanges.Add(1)
	resp, err := hc.Do(req)
	if err != nil {
		return &transportError{err}
	}
	defer resp.Body.Close()
	body := &countingReader{r: resp.Body, n: &c.stats.received}
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(body, maxErrorBody))
		return &HTTPError{
			StatusCode: resp.StatusCode,
			Status:     resp.Status,
			Body:       strings.TrimSpace(strings.ToValidUTF8(string(data), "?")),
		}
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != contentType {
		if contentType == typeAdvertisement {
			return fmt.Errorf("%w: content type %q is not smart HTTP", ErrUnsupported, mt)
		}
		return protocolErrorf("content type %q, want %q", mt, contentType)
	}
	if err := read(newPktReader(body)); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(body, maxDrain))
	return nil
}

// endpoint is the URL of a service below the repository.
func (t *httpTransport) endpoint(path string) (string, error) {
	u, err := url.Parse(t.c.URL)
	if err != nil {
		return "", fmt.Errorf("repository URL %s: not a URL", Redact(t.c.URL))
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("repository URL %s: scheme is not http or https", Redact(t.c.URL))
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("repository URL %s: has a query or fragment", Redact(t.c.URL))
	}
	u.Path = strings.TrimRight(u.Path, "/") + path
	u.RawPath = ""
	return u.String(), nil
}
