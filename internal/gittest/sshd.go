package gittest

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// SSHD is where Debian's openssh-server installs the daemon.
const SSHD = "/usr/sbin/sshd"

// SSHServer is Debian's sshd on loopback serving the repositories under
// Root to one client key, with its own configuration, host key and
// authorized keys. Clients reach it through a TCP proxy that counts the
// bytes and round trips on the wire.
type SSHServer struct {
	// Root holds the served repositories; a repository at Root/NAME is
	// reached at URL(NAME).
	Root string
	// User is the account clients log in as: the one running the test.
	User string
	// Addr is 127.0.0.1:PORT, the proxy in front of sshd.
	Addr string
	// HostKey is the server's public host key.
	HostKey ssh.PublicKey
	// HostKeyECDSA is its second host key, with WithECDSAHostKey.
	HostKeyECDSA ssh.PublicKey
	// KnownHosts is a known_hosts file that lists HostKey for Addr.
	KnownHosts string
	// ClientKey is an OpenSSH private key file the server accepts.
	ClientKey string
	// ClientSigner is ClientKey, parsed.
	ClientSigner ssh.Signer
	// Log is sshd's log file.
	Log string

	sent, received, roundTrips atomic.Int64
}

// SSHOption configures NewSSHServer.
type SSHOption func(*sshConfig)

type sshConfig struct{ noGitProtocol, ecdsa bool }

// WithECDSAHostKey gives sshd an ECDSA host key besides its ed25519 one
// (HostKeyECDSA), as real servers have several.
func WithECDSAHostKey() SSHOption { return func(c *sshConfig) { c.ecdsa = true } }

// WithoutGitProtocolEnv leaves AcceptEnv GIT_PROTOCOL out of sshd_config,
// as many servers have it: git then speaks protocol version 0.
func WithoutGitProtocolEnv() SSHOption { return func(c *sshConfig) { c.noGitProtocol = true } }

// NewSSHServer starts sshd on loopback serving root (a new temporary
// directory if empty); it stops when the test ends. Without sshd the test
// is skipped, or fails when the environment variable CI is set: run `make
// sshd`.
func NewSSHServer(tb testing.TB, root string, opts ...SSHOption) *SSHServer {
	tb.Helper()
	var cfg sshConfig
	for _, o := range opts {
		o(&cfg)
	}
	if _, err := os.Stat(SSHD); err != nil {
		if ci := os.Getenv("CI"); ci != "" && ci != "false" && ci != "0" {
			tb.Fatalf("%s is not installed (CI=%s): run `make sshd`", SSHD, ci)
		}
		tb.Skipf("%s is not installed: run `make sshd`", SSHD)
	}
	if root == "" {
		root = tb.TempDir()
	}
	u, err := user.Current()
	if err != nil {
		tb.Fatal(err)
	}
	dir := tb.TempDir()
	s := &SSHServer{Root: root, User: u.Username, Log: filepath.Join(dir, "sshd.log")}

	hostSigner, hostPEM := newKey(tb)
	s.HostKey = hostSigner.PublicKey()
	writeFile(tb, filepath.Join(dir, "host_ed25519"), hostPEM, 0o600)
	var clientPEM []byte
	s.ClientSigner, clientPEM = newKey(tb)
	s.ClientKey = filepath.Join(dir, "id_ed25519")
	writeFile(tb, s.ClientKey, clientPEM, 0o600)
	writeFile(tb, filepath.Join(dir, "authorized_keys"), ssh.MarshalAuthorizedKey(s.ClientSigner.PublicKey()), 0o600)
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		tb.Fatalf("privilege separation directory: %v", err)
	}

	port := freePort(tb)
	conf := []string{
		fmt.Sprintf("Port %d", port),
		"ListenAddress 127.0.0.1",
		"HostKey " + filepath.Join(dir, "host_ed25519"),
		"AuthorizedKeysFile " + filepath.Join(dir, "authorized_keys"),
		"PidFile " + filepath.Join(dir, "sshd.pid"),
		"StrictModes no",
		"UsePAM no",
		"PasswordAuthentication no",
		"KbdInteractiveAuthentication no",
		"PubkeyAuthentication yes",
		"PermitRootLogin prohibit-password",
		"LogLevel VERBOSE",
	}
	if !cfg.noGitProtocol {
		conf = append(conf, "AcceptEnv GIT_PROTOCOL")
	}
	if cfg.ecdsa {
		priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			tb.Fatal(err)
		}
		block, err := ssh.MarshalPrivateKey(priv, "")
		if err != nil {
			tb.Fatal(err)
		}
		signer, err := ssh.NewSignerFromKey(priv)
		if err != nil {
			tb.Fatal(err)
		}
		s.HostKeyECDSA = signer.PublicKey()
		writeFile(tb, filepath.Join(dir, "host_ecdsa"), pem.EncodeToMemory(block), 0o600)
		conf = append(conf, "HostKey "+filepath.Join(dir, "host_ecdsa"))
	}
	confFile := filepath.Join(dir, "sshd_config")
	writeFile(tb, confFile, []byte(strings.Join(conf, "\n")+"\n"), 0o600)
	cmd := exec.Command(SSHD, "-D", "-f", confFile, "-E", s.Log)
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start sshd: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	backend := fmt.Sprintf("127.0.0.1:%d", port)
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", backend, time.Second)
		if err == nil {
			c.Close()
			break
		}
		select {
		case <-done:
			log, _ := os.ReadFile(s.Log)
			tb.Fatalf("sshd exited: %s", log)
		default:
		}
		if time.Now().After(deadline) {
			tb.Fatalf("sshd did not listen on %s", backend)
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.Addr = s.proxy(tb, backend)
	s.KnownHosts = filepath.Join(dir, "known_hosts")
	writeFile(tb, s.KnownHosts, []byte(knownhosts.Line([]string{knownhosts.Normalize(s.Addr)}, s.HostKey)+"\n"), 0o600)
	return s
}

// URL is the ssh:// address of the repository Root/name.
func (s *SSHServer) URL(name string) string {
	return "ssh://" + s.User + "@" + s.Addr + filepath.Join(s.Root, name)
}

// InitBare makes a bare repository Root/name and returns its path.
func (s *SSHServer) InitBare(tb testing.TB, name string) string {
	tb.Helper()
	dir := filepath.Join(s.Root, name)
	InitBare(tb, dir)
	return dir
}

// Wire is what crossed the proxy since the last ResetWire: bytes each
// way, SSH framing and encryption included, and round trips (each time
// the server answered after the client spoke).
func (s *SSHServer) Wire() (sent, received, roundTrips int64) {
	return s.sent.Load(), s.received.Load(), s.roundTrips.Load()
}

// ResetWire zeroes the wire counts.
func (s *SSHServer) ResetWire() {
	s.sent.Store(0)
	s.received.Store(0)
	s.roundTrips.Store(0)
}

// proxy forwards loopback connections to backend, counting the traffic.
func (s *SSHServer) proxy(tb testing.TB, backend string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	tb.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b, err := net.Dial("tcp", backend)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, b)
			mu.Unlock()
			var clientSpoke atomic.Bool
			wg.Add(2)
			go func() {
				defer wg.Done()
				s.pipe(b, c, &s.sent, func() { clientSpoke.Store(true) })
				b.Close()
			}()
			go func() {
				defer wg.Done()
				s.pipe(c, b, &s.received, func() {
					if clientSpoke.Swap(false) {
						s.roundTrips.Add(1)
					}
				})
				c.Close()
			}()
		}
	}()
	return ln.Addr().String()
}

func (s *SSHServer) pipe(dst io.Writer, src io.Reader, n *atomic.Int64, each func()) {
	buf := make([]byte, 32<<10)
	for {
		k, err := src.Read(buf)
		if k > 0 {
			each()
			n.Add(int64(k))
			if _, werr := dst.Write(buf[:k]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// NewSSHKey makes an ed25519 key: its signer and its OpenSSH private key
// file contents.
func NewSSHKey(tb testing.TB) (ssh.Signer, []byte) { return newKey(tb) }

func newKey(tb testing.TB) (ssh.Signer, []byte) {
	tb.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		tb.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		tb.Fatal(err)
	}
	return signer, pem.EncodeToMemory(block)
}

func writeFile(tb testing.TB, path string, data []byte, mode os.FileMode) {
	tb.Helper()
	if err := os.WriteFile(path, data, mode); err != nil {
		tb.Fatal(err)
	}
}

func freePort(tb testing.TB) int {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
