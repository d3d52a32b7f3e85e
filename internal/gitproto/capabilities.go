package gitproto

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
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
// the first time: over HTTP a GET of info/refs?service=git-upload-pack with
// Git-Protocol: version=2, over SSH the opening of a git-upload-pack
// session. It fails with ErrUnsupported unless the server answers with
// version 2, offers ls-refs and fetch, and uses SHA-1 object names. Once it
// succeeds the answer is cached for the Client's lifetime.
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
	t, err := c.transport()
	if err != nil {
		return nil, err
	}
	v0 := false
	call := &uploadCall{
		request: func() ([]byte, error) { return nil, nil },
		read:    func(*pktReader) error { return nil },
		v0: func(context.Context, *v0Advertisement, roundTripper) error {
			v0 = true
			return nil
		},
	}
	switch t := t.(type) {
	case *httpTransport:
		caps, adv, err := t.discover(ctx)
		if adv != nil {
			return nil, fmt.Errorf("%w: it answered in protocol version 0", ErrUnsupported)
		}
		return caps, err
	default:
		if err := t.uploadPack(ctx, call); err != nil {
			return nil, err
		}
	}
	if v0 {
		return nil, fmt.Errorf("%w: it answered in protocol version 0", ErrUnsupported)
	}
	if caps := c.caps.Load(); caps != nil {
		return *caps, nil
	}
	return nil, protocolErrorf("no capability advertisement")
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

// readAdvertisement parses the answer to the info/refs GET of a server
// that must speak version 2; a version 0 answer is ErrUnsupported.
func readAdvertisement(p *pktReader) (Capabilities, error) {
	caps, adv, err := readOpening(p, "git-upload-pack")
	if err == nil && adv != nil {
		err = fmt.Errorf("%w: it answered in protocol version 0 or 1", ErrUnsupported)
	}
	return caps, err
}

// readOpening parses what a server says first: the capabilities of
// protocol version 2, or the ref advertisement of version 0 (and 1). Over
// HTTP servers may start with the "# service=..." packet and a flush, as in
// protocol version 0; git's http-backend leaves them out for version 2.
func readOpening(p *pktReader, service string) (Capabilities, *v0Advertisement, error) {
	kind, line, err := p.line()
	if err != nil {
		return nil, nil, err
	}
	isService := kind == pktData && strings.HasPrefix(line, "# service=")
	if isService {
		if line != "# service="+service {
			return nil, nil, protocolErrorf("advertisement for %q", strings.TrimPrefix(line, "# service="))
		}
		if kind, _, err = p.line(); err != nil {
			return nil, nil, err
		}
		if kind != pktFlush {
			return nil, nil, protocolErrorf("%s after the service line", kind)
		}
		if kind, line, err = p.line(); err != nil {
			return nil, nil, err
		}
	}
	if kind == pktData && line == "version 1" {
		if kind, line, err = p.line(); err != nil {
			return nil, nil, err
		}
		if kind != pktData {
			return nil, nil, protocolErrorf("%s after version 1", kind)
		}
	}
	switch {
	case kind == pktFlush:
		// Version 0 from a repository without refs: nothing to list.
		return nil, &v0Advertisement{refs: map[plumbing.ReferenceName]plumbing.Hash{}, caps: Capabilities{}}, nil
	case kind != pktData:
		return nil, nil, protocolErrorf("advertisement starts with a %s", kind)
	case isRefLine(line):
		adv, err := readRefAdvertisement(p, line)
		return nil, adv, err
	case line != "version 2":
		return nil, nil, protocolErrorf("advertisement starts with %q", truncate(line))
	}
	caps := Capabilities{}
	for {
		kind, line, err := p.line()
		switch {
		case err != nil:
			return nil, nil, err
		case kind == pktFlush:
			return caps, nil, nil
		case kind != pktData:
			return nil, nil, protocolErrorf("%s in the capability advertisement", kind)
		}
		name, value, _ := strings.Cut(line, "=")
		if name == "" {
			return nil, nil, protocolErrorf("empty capability in %q", truncate(line))
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
