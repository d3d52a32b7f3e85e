package gitproto

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// SSHAuth is how a Client logs in to an SSH server.
type SSHAuth struct {
	// Signer is the client's private key.
	Signer ssh.Signer
	// HostKeyCallback checks the server's host key; required, there is no
	// way to skip the check. Use knownhosts.New on a known_hosts file.
	HostKeyCallback ssh.HostKeyCallback
	// HostKeyAlgorithms, if set, are the host key types to accept, most
	// preferred first: those known_hosts has for the host, so that a
	// server with several host keys shows the one that is known.
	HostKeyAlgorithms []string
	// Timeout bounds the TCP connection and the SSH handshake; default
	// DefaultSSHTimeout.
	Timeout time.Duration
}

// DefaultSSHTimeout is SSHAuth.Timeout's default.
const DefaultSSHTimeout = 30 * time.Second

// ErrHostKey is wrapped by errors for an SSH server whose host key
// known_hosts does not list, or lists with another key. It is never
// temporary: a changed host key may be an attack.
var ErrHostKey = errors.New("ssh host key is not trusted")

// ErrUnauthorized is wrapped by errors for an SSH server that refused the
// client's key.
var ErrUnauthorized = errors.New("ssh server refused the key")

// SSHEndpoint is where an SSH location points.
type SSHEndpoint struct {
	// User logs in; empty means the local user name, as for ssh.
	User string
	// Host is a name or an IP address, without brackets.
	Host string
	// Port is the TCP port; 0 means 22.
	Port int
	// Path is the repository as git-upload-pack gets it: absolute for
	// ssh://host/path, relative to the user's home for host:path and
	// ssh://host/~/path.
	Path string
	// scp is true for the scp-like form.
	scp bool
}

// String is the location without its user, for messages.
func (e SSHEndpoint) String() string {
	if e.scp {
		host := e.Host
		if strings.Contains(host, ":") {
			host = "[" + host + "]"
		}
		return host + ":" + e.Path
	}
	host := e.Host
	if e.Port != 0 {
		host = net.JoinHostPort(e.Host, strconv.Itoa(e.Port))
	} else if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	path := e.Path
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	return "ssh://" + host + path
}

// Login is the user to log in as: User, or else the local user name, as
// ssh does.
func (e SSHEndpoint) Login() string {
	if e.User != "" {
		return e.User
	}
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return "git"
}

// addr is host:port for dialing and for known_hosts.
func (e SSHEndpoint) addr() string {
	port := e.Port
	if port == 0 {
		port = 22
	}
	return net.JoinHostPort(e.Host, strconv.Itoa(port))
}

// ParseSSH reports whether location names a repository over SSH, as git
// reads it: ssh://[user@]host[:port]/path (also git+ssh:// and ssh+git://)
// or scp-like [user@]host:path, where no slash comes before the first
// colon. When ok, err says what is wrong with the location.
func ParseSSH(location string) (e SSHEndpoint, ok bool, err error) {
	for _, scheme := range []string{"ssh://", "git+ssh://", "ssh+git://"} {
		if strings.HasPrefix(location, scheme) {
			return parseSSHURL(location)
		}
	}
	if strings.Contains(location, "://") {
		return SSHEndpoint{}, false, nil
	}
	rest := location
	var host string
	at := strings.IndexByte(rest, '@')
	colon := strings.IndexByte(rest, ':')
	if colon < 0 || strings.Contains(rest[:colon], "/") {
		return SSHEndpoint{}, false, nil
	}
	if at >= 0 && at < colon {
		e.User, rest = rest[:at], rest[at+1:]
	}
	if strings.HasPrefix(rest, "[") {
		end := strings.Index(rest, "]:")
		if end < 0 {
			return e, true, errors.New("ssh location: unclosed [ in the host")
		}
		host, rest = rest[1:end], rest[end+2:]
	} else {
		i := strings.IndexByte(rest, ':')
		if i < 0 {
			return SSHEndpoint{}, false, nil
		}
		host, rest = rest[:i], rest[i+1:]
	}
	e.Host, e.Path, e.scp = host, rest, true
	switch {
	case host == "":
		return e, true, errors.New("ssh location: no host")
	case strings.ContainsAny(host, "/@ \x00"):
		return e, true, fmt.Errorf("ssh location %s: bad host", e)
	case e.Path == "":
		return e, true, fmt.Errorf("ssh location %s: no repository path", e)
	case strings.ContainsAny(e.User, ":/ \x00"):
		return e, true, fmt.Errorf("ssh location %s: bad user name", e)
	case strings.ContainsRune(e.Path, 0) || strings.ContainsRune(e.Path, '\n'):
		return e, true, fmt.Errorf("ssh location %s: bad path", e)
	}
	return e, true, nil
}

func parseSSHURL(location string) (SSHEndpoint, bool, error) {
	u, err := url.Parse(location)
	if err != nil {
		return SSHEndpoint{}, true, errors.New("ssh location: not a URL")
	}
	var e SSHEndpoint
	if u.User != nil {
		if _, has := u.User.Password(); has {
			return e, true, errors.New("ssh location: a password in the URL is not supported; use a key")
		}
		e.User = u.User.Username()
	}
	e.Host = u.Hostname()
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n <= 0 || n > 65535 {
			return e, true, fmt.Errorf("ssh location %s: bad port", e)
		}
		e.Port = n
	}
	e.Path = u.Path
	if strings.HasPrefix(e.Path, "/~") {
		e.Path = e.Path[1:]
	}
	switch {
	case e.Host == "":
		return e, true, errors.New("ssh location: no host")
	case e.Path == "" || e.Path == "/":
		return e, true, fmt.Errorf("ssh location %s: no repository path", e)
	case u.RawQuery != "" || u.Fragment != "":
		return e, true, fmt.Errorf("ssh location %s: has a query or fragment", e)
	case strings.ContainsAny(e.Path, "\x00\n") || strings.ContainsAny(e.User, ": \x00"):
		return e, true, fmt.Errorf("ssh location %s: bad path or user", e)
	}
	return e, true, nil
}

// shellQuote quotes s for the remote shell as git does (sq_quote_buf):
// inside single quotes, ' and ! are closed, escaped and reopened.
func shellQuote(s string) string {
	var b strings.Builder
	b.WriteByte('\'')
	for _, c := range []byte(s) {
		if c == '\'' || c == '!' {
			b.WriteString("'\\")
			b.WriteByte(c)
			b.WriteByte('\'')
			continue
		}
		b.WriteByte(c)
	}
	b.WriteByte('\'')
	return b.String()
}

// sshTransport runs git-upload-pack and git-receive-pack in SSH sessions
// on one connection per Client: a session is a stream, so the server
// speaks first (its advertisement), then the client.
type sshTransport struct {
	c  *Client
	ep SSHEndpoint
}

var _ transport = (*sshTransport)(nil)

func (t *sshTransport) host() string { return t.ep.addr() }

// uploadPack asks for protocol version 2 with the GIT_PROTOCOL variable. A
// server that does not pass it to git (sshd without AcceptEnv
// GIT_PROTOCOL) answers in version 0, and call.v0 goes on in that session.
func (t *sshTransport) uploadPack(ctx context.Context, call *uploadCall) error {
	return t.session(ctx, "git-upload-pack", true, func(w io.Writer, p *pktReader) error {
		caps, adv, err := readOpening(p, "git-upload-pack")
		if err != nil {
			return err
		}
		if adv != nil {
			if call.v0 == nil {
				return fmt.Errorf("%w: it answered in protocol version 0", ErrUnsupported)
			}
			t.c.fallback(t.host())
			err := call.v0(ctx, adv, streamRoundTripper{w: w, p: p})
			// Tell upload-pack there is nothing (more) to fetch.
			_, _ = io.WriteString(w, "0000")
			return err
		}
		if err := checkCapabilities(caps); err != nil {
			return err
		}
		t.c.caps.Store(&caps)
		t.c.stats.version.Store(2)
		body, err := call.request()
		if err != nil || body == nil {
			return err
		}
		if _, err := w.Write(body); err != nil {
			return &transportError{err}
		}
		return call.read(p)
	})
}

// receivePack reads the ref advertisement receive-pack always sends, then
// sends the push.
func (t *sshTransport) receivePack(ctx context.Context, call *pushCall) error {
	return t.session(ctx, "git-receive-pack", false, func(w io.Writer, p *pktReader) error {
		_, adv, err := readOpening(p, "git-receive-pack")
		if err != nil {
			return err
		}
		if adv == nil {
			return protocolErrorf("receive-pack answered in protocol version 2")
		}
		body, err := call.request(adv)
		if err != nil {
			// No commands: receive-pack ends quietly.
			_, _ = io.WriteString(w, "0000")
			return err
		}
		if _, err := w.Write(body); err != nil {
			return &transportError{err}
		}
		return call.read(p)
	})
}

// streamRoundTripper writes a request on a session and reads the answer
// from it.
type streamRoundTripper struct {
	w io.Writer
	p *pktReader
}

func (s streamRoundTripper) roundTrip(_ context.Context, body []byte, read func(*pktReader) error) error {
	if _, err := s.w.Write(body); err != nil {
		return &transportError{err}
	}
	return read(s.p)
}

// session runs service on the repository in a new session and hands its
// standard input and output to talk. What the service writes to standard
// error becomes a *RemoteError when the conversation fails.
func (t *sshTransport) session(ctx context.Context, service string, v2 bool, talk func(io.Writer, *pktReader) error) error {
	sess, err := t.newSession(ctx)
	if err != nil {
		return err
	}
	defer sess.Close()
	if v2 {
		// OpenSSH ignores variables its AcceptEnv does not list; the
		// server then speaks version 0, which the opening shows. No reply
		// is asked for: it would cost a round trip.
		env := struct{ Name, Value string }{"GIT_PROTOCOL", "version=2"}
		if _, err := sess.SendRequest("env", false, ssh.Marshal(&env)); err != nil {
			return &transportError{err}
		}
	}
	stdin, err := sess.StdinPipe()
	if err != nil {
		return &transportError{err}
	}
	stdout, err := sess.StdoutPipe()
	if err != nil {
		return &transportError{err}
	}
	stderr := &limitedBuffer{max: maxErrorBody}
	sess.Stderr = stderr
	if err := sess.Start(service + " " + shellQuote(t.ep.Path)); err != nil {
		return &transportError{err}
	}
	t.c.stats.exchanges.Add(1)
	stop := context.AfterFunc(ctx, func() { sess.Close() })
	defer stop()
	err = talk(&countingWriter{w: stdin, n: &t.c.stats.sent}, newPktReader(&countingReader{r: stdout, n: &t.c.stats.received}))
	_, broken := errors.AsType[*transportError](err)
	hungUp := broken || errors.Is(err, io.ErrUnexpectedEOF)
	if err != nil && !hungUp {
		// The server may still be writing (a long advertisement) and
		// would wait for window space for ever: end the session.
		sess.Close()
	}
	stdin.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(stdout, maxDrain))
	werr := sess.Wait()
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("ssh %s: %w", t.ep, cerr)
	}
	if err == nil {
		return nil
	}
	if msg := strings.TrimSpace(stderr.String()); msg != "" && werr != nil && hungUp {
		// The server hung up; its standard error says why.
		return fmt.Errorf("%w: %w", &RemoteError{Message: msg}, err)
	}
	return err
}

// newSession opens a session on the Client's connection, dialing it first
// if there is none or the old one broke.
func (t *sshTransport) newSession(ctx context.Context) (*ssh.Session, error) {
	for attempt := 0; ; attempt++ {
		conn, fresh, err := t.c.sshClient(ctx, t.ep)
		if err != nil {
			return nil, err
		}
		sess, err := conn.NewSession()
		if err == nil {
			return sess, nil
		}
		t.c.dropSSH(conn)
		if fresh || attempt > 0 {
			return nil, &transportError{fmt.Errorf("ssh %s: open session: %w", t.ep, err)}
		}
	}
}

// sshClient returns the Client's connection, dialing it if needed; fresh
// says it was just dialed.
func (c *Client) sshClient(ctx context.Context, ep SSHEndpoint) (conn *ssh.Client, fresh bool, err error) {
	c.sshMu.Lock()
	defer c.sshMu.Unlock()
	if c.sshConn != nil {
		return c.sshConn, false, nil
	}
	if c.SSH == nil || c.SSH.Signer == nil || c.SSH.HostKeyCallback == nil {
		return nil, false, fmt.Errorf("ssh %s: no private key or known_hosts given", ep)
	}
	name := ep.Login()
	timeout := c.SSH.Timeout
	if timeout == 0 {
		timeout = DefaultSSHTimeout
	}
	var hostKeyErr error
	var once sync.Once
	cfg := &ssh.ClientConfig{
		User: name,
		Auth: []ssh.AuthMethod{ssh.PublicKeys(c.SSH.Signer)},
		HostKeyCallback: func(host string, remote net.Addr, key ssh.PublicKey) error {
			err := c.SSH.HostKeyCallback(host, remote, key)
			if err != nil {
				once.Do(func() { hostKeyErr = hostKeyError(ep, key, err) })
			}
			return err
		},
		HostKeyAlgorithms: c.SSH.HostKeyAlgorithms,
		ClientVersion:     "SSH-2.0-" + userAgent,
		Timeout:           timeout,
	}
	d := net.Dialer{Timeout: timeout}
	raw, err := d.DialContext(ctx, "tcp", ep.addr())
	if err != nil {
		return nil, false, &transportError{fmt.Errorf("ssh %s: %w", ep, err)}
	}
	deadline := time.Now().Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = raw.SetDeadline(deadline)
	if len(cfg.HostKeyAlgorithms) == 0 {
		cfg.HostKeyAlgorithms = knownAlgorithms(c.SSH.HostKeyCallback, ep.addr(), raw.RemoteAddr())
	}
	stop := context.AfterFunc(ctx, func() { raw.Close() })
	cc, chans, reqs, err := ssh.NewClientConn(raw, ep.addr(), cfg)
	stop()
	if err != nil {
		raw.Close()
		switch {
		case hostKeyErr != nil:
			return nil, false, hostKeyErr
		case ctx.Err() != nil:
			return nil, false, fmt.Errorf("ssh %s: %w", ep, ctx.Err())
		case strings.Contains(err.Error(), "unable to authenticate"):
			return nil, false, fmt.Errorf("ssh %s as %s: %w: %v", ep, name, ErrUnauthorized, err)
		}
		return nil, false, &transportError{fmt.Errorf("ssh %s: %w", ep, err)}
	}
	_ = raw.SetDeadline(time.Time{})
	c.sshConn = ssh.NewClient(cc, chans, reqs)
	return c.sshConn, true, nil
}

// knownAlgorithms asks a known_hosts callback which key types it knows
// for host, by offering it a key of no type it can know: its KeyError
// lists the known keys. The handshake then asks the server for one of
// those, so a server with several host keys shows one that known_hosts
// has rather than failing as if its key changed. Nil (the library's
// default order) when the callback says nothing.
func knownAlgorithms(cb ssh.HostKeyCallback, host string, remote net.Addr) []string {
	var ke *knownhosts.KeyError
	if err := cb(host, remote, probeKey{}); !errors.As(err, &ke) {
		return nil
	}
	var algos []string
	add := func(a ...string) {
		for _, x := range a {
			if !slices.Contains(algos, x) {
				algos = append(algos, x)
			}
		}
	}
	for _, k := range ke.Want {
		switch t := k.Key.Type(); t {
		case ssh.KeyAlgoRSA:
			add(ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA)
		default:
			add(t)
		}
	}
	return algos
}

// probeKey is a public key of a type no known_hosts file lists.
type probeKey struct{}

func (probeKey) Type() string                        { return "nuon-probe@nuon.dev" }
func (probeKey) Marshal() []byte                     { return []byte("nuon-probe") }
func (probeKey) Verify([]byte, *ssh.Signature) error { return errors.New("probe key") }

// dropSSH forgets a broken connection.
func (c *Client) dropSSH(conn *ssh.Client) {
	c.sshMu.Lock()
	defer c.sshMu.Unlock()
	if c.sshConn == conn {
		c.sshConn.Close()
		c.sshConn = nil
	}
}

func hostKeyError(ep SSHEndpoint, key ssh.PublicKey, err error) error {
	return HostKeyError(ep.String(), key, err)
}

// HostKeyError explains why a known_hosts callback refused the key a host
// offered: the host is unknown, its key changed (naming the file and line
// of the known key) or is revoked. It wraps ErrHostKey.
func HostKeyError(ep string, key ssh.PublicKey, err error) error {
	offered := key.Type() + " " + ssh.FingerprintSHA256(key)
	var ke *knownhosts.KeyError
	if errors.As(err, &ke) {
		if len(ke.Want) == 0 {
			return fmt.Errorf("ssh %s: %w: the host is not in known_hosts (it offered %s); add its key to the known_hosts file",
				ep, ErrHostKey, offered)
		}
		k := ke.Want[0]
		return fmt.Errorf("ssh %s: %w: the host key CHANGED: it offered %s, but %s line %d has %s %s; this may be an attack, or the server was reinstalled",
			ep, ErrHostKey, offered, k.Filename, k.Line, k.Key.Type(), ssh.FingerprintSHA256(k.Key))
	}
	var re *knownhosts.RevokedError
	if errors.As(err, &re) {
		return fmt.Errorf("ssh %s: %w: the host key %s is revoked in known_hosts", ep, ErrHostKey, offered)
	}
	return fmt.Errorf("ssh %s: %w: %v", ep, ErrHostKey, err)
}

// limitedBuffer keeps the first max bytes written to it.
type limitedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.max - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (b *limitedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.ToValidUTF8(b.buf.String(), "?")
}
