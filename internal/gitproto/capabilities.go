package gitproto

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
)

// Capabilities is a protocol v2 capability advertisement: each
// capability's name and its value, "" when it has none. git 2.39 advertises
// agent=git/2.39.5, ls-refs=unborn, fetch=shallow wait-for-done,
// server-option, object-format=sha1 and object-info.
type Capabilities map[string]string

// Supports reports whether the server advertises capability name and lists
// each of features in its space-separated value (fetch=shallow filter).
func (c Capabilities) Supports(name string, features ...string) bool {
	v, ok := c[name]
	if !ok {
		return false
	}
	have := strings.Fields(v)
	for _, f := range features {
		if !slices.Contains(have, f) {
			return false
		}
	}
	return true
}

// Capabilities returns the server's capability advertisement, asking for it
// the first time: a GET of info/refs?service=git-upload-pack with
// Git-Protocol: version=2. It fails with ErrUnsupported unless the server
// answers with version 2, offers ls-refs and fetch, and uses SHA-1 object
// names. Once it succeeds the answer is cached for the Client's lifetime.
func (c *Client) Capabilities(ctx context.Context) (Capabilities, error) {
	caps, err := c.discover(ctx)
	if err != nil {
		return nil, fmt.Errorf("capabilities %s: %w", c.redacted(), err)
	}
	return maps.Clone(caps), nil
}

// discover is Capabilities without the copy and the URL in errors.
func (c *Client) discover(ctx context.Context) (Capabilities, error) {
	if caps := c.caps.Load(); caps != nil {
		return *caps, nil
	}
	u, err := c.endpoint("/info/refs")
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u+"?service=git-upload-pack", nil)
	if err != nil {
		return nil, err
	}
	// As git does, so that no proxy answers from a cache.
	req.Header.Set("Pragma", "no-cache")
	var caps Capabilities
	err = c.do(req, typeAdvertisement, func(p *pktReader) error {
		caps, err = readAdvertisement(p)
		return err
	})
	if err == nil {
		err = checkCapabilities(caps)
	}
	if err != nil {
		return nil, err
	}
	c.caps.Store(&caps)
	return caps, nil
}

// checkCapabilities fails unless the server offers what this package uses.
func checkCapabilities(caps Capabilities) error {
	for _, cmd := range []string{"ls-refs", "fetch"} {
		if !caps.Supports(cmd) {
			return fmt.Errorf("%w: no %s command", ErrUnsupported, cmd)
		}
	}
	if f, ok := caps["object-format"]; ok && f != "sha1" {
		return fmt.Errorf("%w: object format %s", ErrUnsupported, f)
	}
	return nil
}

// readAdvertisement parses the answer to the info/refs GET. Servers may
// start it with the "# service=git-upload-pack" packet and a flush, as in
// protocol version 0; git's http-backend leaves them out for version 2.
func readAdvertisement(p *pktReader) (Capabilities, error) {
	kind, line, err := p.line()
	if err != nil {
		return nil, err
	}
	service := kind == pktData && strings.HasPrefix(line, "# service=")
	if service {
		if line != "# service=git-upload-pack" {
			return nil, protocolErrorf("advertisement for %q", strings.TrimPrefix(line, "# service="))
		}
		if kind, _, err = p.line(); err != nil {
			return nil, err
		}
		if kind != pktFlush {
			return nil, protocolErrorf("%s after the service line", kind)
		}
		if kind, line, err = p.line(); err != nil {
			return nil, err
		}
	}
	switch {
	case kind == pktFlush && service:
		// Version 0 from a repository without refs: nothing to list.
		return nil, fmt.Errorf("%w: it answered in protocol version 0", ErrUnsupported)
	case kind != pktData:
		return nil, protocolErrorf("advertisement starts with a %s", kind)
	case line == "version 1" || isRefLine(line):
		return nil, fmt.Errorf("%w: it answered in protocol version 0 or 1", ErrUnsupported)
	case line != "version 2":
		return nil, protocolErrorf("advertisement starts with %q", truncate(line))
	}
	caps := Capabilities{}
	for {
		kind, line, err := p.line()
		switch {
		case err != nil:
			return nil, err
		case kind == pktFlush:
			return caps, nil
		case kind != pktData:
			return nil, protocolErrorf("%s in the capability advertisement", kind)
		}
		name, value, _ := strings.Cut(line, "=")
		if name == "" {
			return nil, protocolErrorf("empty capability in %q", truncate(line))
		}
		caps[name] = value
	}
}

// isRefLine says whether line starts like a protocol version 0 ref
// advertisement: an object name and a space.
func isRefLine(line string) bool {
	oid, _, ok := strings.Cut(line, " ")
	return ok && isHex(oid) && (len(oid) == 40 || len(oid) == 64)
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return s != ""
}
