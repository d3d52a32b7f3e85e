package gitauth

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"github.com/spf13/pflag"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"nuon.dev/nuon/internal/gitproto"
)

// Environment variables read when the matching file flag is not given.
const (
	EnvToken    = "NUON_GIT_TOKEN"
	EnvPassword = "NUON_GIT_PASSWORD"
)

// Options name where the credentials are; the zero value means none.
type Options struct {
	// TokenFile holds a bearer token for HTTPS; default EnvToken.
	TokenFile string
	// Username is the basic auth user for HTTPS.
	Username string
	// PasswordFile holds the basic auth password; default EnvPassword.
	PasswordFile string
	// SSHKey is an OpenSSH private key file for ssh:// and user@host:path.
	SSHKey string
	// KnownHosts is the known_hosts file that SSH host keys are checked
	// against; default ~/.ssh/known_hosts.
	KnownHosts string
}

// AddFlags adds the options' flags to fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.TokenFile, "git-token-file", "", "file holding a bearer token for an https:// repository (default: $"+EnvToken+")")
	fs.StringVar(&o.Username, "git-username", "", "basic auth user for an https:// repository; the password comes from --git-password-file or $"+EnvPassword)
	fs.StringVar(&o.PasswordFile, "git-password-file", "", "file holding the basic auth password (default: $"+EnvPassword+")")
	fs.StringVar(&o.SSHKey, "ssh-key", "", "OpenSSH private key file for an ssh:// or user@host:path repository")
	fs.StringVar(&o.KnownHosts, "known-hosts", "", "known_hosts file that the SSH server's host key must be in (default ~/.ssh/known_hosts)")
}

// Help is a paragraph for a command's --help about these flags.
const Help = `Credentials for the repository never go in argv or in the URL:
  https:// with a token:   --git-token-file FILE, or $` + EnvToken + `
  https:// with a password: --git-username NAME and --git-password-file FILE, or $` + EnvPassword + `
  ssh://user@host[:port]/path or user@host:path: --ssh-key FILE and --known-hosts FILE
The SSH host key is always checked against known_hosts.`

// Auth is loaded credentials. The zero value and nil have none.
type Auth struct {
	token              string
	username, password string
	signer             ssh.Signer
	hostKeys           ssh.HostKeyCallback
	// keyFile and knownHosts are the absolute paths the SSH key and host
	// keys came from, for OpenSSH under the git command line (Env).
	keyFile, knownHosts string
	// from says where the credentials came from, for String.
	from []string
}

// Load reads the files the options name and the environment through
// getenv (os.Getenv when nil).
func (o Options) Load(getenv func(string) string) (*Auth, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	a := &Auth{}
	var err error
	if a.token, err = secret(o.TokenFile, EnvToken, getenv); err != nil {
		return nil, err
	}
	if a.token != "" {
		a.from = append(a.from, "token from "+source(o.TokenFile, EnvToken))
	}
	if o.Username != "" {
		if a.token != "" {
			return nil, errors.New("git credentials: give a token or a user name and password, not both")
		}
		a.username = o.Username
		if a.password, err = secret(o.PasswordFile, EnvPassword, getenv); err != nil {
			return nil, err
		}
		if a.password == "" {
			return nil, fmt.Errorf("git credentials: --git-username %s needs --git-password-file or $%s", o.Username, EnvPassword)
		}
		a.from = append(a.from, "password of "+o.Username+" from "+source(o.PasswordFile, EnvPassword))
	} else if o.PasswordFile != "" {
		return nil, errors.New("git credentials: --git-password-file needs --git-username")
	}
	if o.SSHKey != "" {
		data, err := os.ReadFile(o.SSHKey)
		if err != nil {
			return nil, fmt.Errorf("ssh key: %w", err)
		}
		a.signer, err = ssh.ParsePrivateKey(data)
		if _, ok := errors.AsType[*ssh.PassphraseMissingError](err); ok {
			return nil, fmt.Errorf("ssh key %s: encrypted with a passphrase, which is not supported; use a key for this purpose alone", o.SSHKey)
		}
		if err != nil {
			return nil, fmt.Errorf("ssh key %s: %w", o.SSHKey, err)
		}
		kh := o.KnownHosts
		if kh == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				return nil, fmt.Errorf("known_hosts: %w", err)
			}
			kh = filepath.Join(home, ".ssh", "known_hosts")
		}
		if a.hostKeys, err = knownhosts.New(kh); err != nil {
			return nil, fmt.Errorf("known_hosts: %w", err)
		}
		if a.keyFile, err = filepath.Abs(o.SSHKey); err != nil {
			return nil, fmt.Errorf("ssh key: %w", err)
		}
		if a.knownHosts, err = filepath.Abs(kh); err != nil {
			return nil, fmt.Errorf("known_hosts: %w", err)
		}
		a.from = append(a.from, "ssh key "+o.SSHKey+" with known hosts "+kh)
	} else if o.KnownHosts != "" {
		return nil, errors.New("git credentials: --known-hosts needs --ssh-key")
	}
	return a, nil
}

func secret(file, env string, getenv func(string) string) (string, error) {
	if file == "" {
		return strings.TrimSpace(getenv(env)), nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("git credentials: %w", err)
	}
	s := strings.TrimSpace(string(data))
	if s == "" {
		return "", fmt.Errorf("git credentials: %s is empty", file)
	}
	return s, nil
}

func source(file, env string) string {
	if file != "" {
		return file
	}
	return "$" + env
}

// String says which credentials there are, never what they are.
func (a *Auth) String() string {
	if a == nil || len(a.from) == 0 {
		return "no git credentials"
	}
	return strings.Join(a.from, ", ")
}

// LogValue keeps secrets out of slog output.
func (a *Auth) LogValue() slog.Value { return slog.StringValue(a.String()) }

// http reports whether a has HTTP credentials.
func (a *Auth) http() bool { return a != nil && (a.token != "" || a.username != "") }

// SetHeader sets the Authorization header of req: bearer with a token,
// basic with a user name and password, nothing without either.
func (a *Auth) SetHeader(req *http.Request) {
	switch {
	case a == nil:
	case a.token != "":
		req.Header.Set("Authorization", "Bearer "+a.token)
	case a.username != "":
		req.SetBasicAuth(a.username, a.password)
	}
}

// SSH is the SSH login, nil without a key.
func (a *Auth) SSH() *gitproto.SSHAuth {
	if a == nil || a.signer == nil {
		return nil
	}
	return &gitproto.SSHAuth{Signer: a.signer, HostKeyCallback: a.hostKeys}
}

// Check fails if a's credentials cannot be used safely for location: HTTP
// credentials to a plain http:// address other than loopback, or a URL
// that carries credentials of its own besides.
func (a *Auth) Check(location string) error {
	if !a.http() {
		return nil
	}
	u, err := url.Parse(location)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return nil
	}
	if u.User != nil {
		return fmt.Errorf("repository %s: has user information in the URL as well as git credentials; remove it from the URL", gitproto.Redact(location))
	}
	if u.Scheme == "http" {
		ip := net.ParseIP(u.Hostname())
		if u.Hostname() != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return fmt.Errorf("repository %s: refusing to send git credentials over plain http; use https", gitproto.Redact(location))
		}
	}
	return nil
}

// Client returns a gitproto client for location that sends a's
// credentials and every HTTP request through hc (nil: http.DefaultClient).
func (a *Auth) Client(location string, hc *http.Client, log *slog.Logger) (*gitproto.Client, error) {
	if err := a.Check(location); err != nil {
		return nil, err
	}
	c := &gitproto.Client{URL: location, HTTP: hc, SSH: a.SSH(), Log: log}
	if a.http() {
		c.Auth = a.SetHeader
	}
	return c, nil
}

// GoGit is a's credentials as go-git wants them for location, nil when
// there are none for its transport.
func (a *Auth) GoGit(location string) (transport.AuthMethod, error) {
	if err := a.Check(location); err != nil {
		return nil, err
	}
	if ep, ok, err := gitproto.ParseSSH(location); ok {
		if err != nil {
			return nil, err
		}
		if a.SSH() == nil {
			return nil, fmt.Errorf("repository %s: an ssh repository needs --ssh-key", ep)
		}
		check := func(host string, remote net.Addr, key ssh.PublicKey) error {
			if err := a.hostKeys(host, remote, key); err != nil {
				return gitproto.HostKeyError(ep.String(), key, err)
			}
			return nil
		}
		return &gitssh.PublicKeys{User: ep.Login(), Signer: a.signer,
			HostKeyCallbackHelper: gitssh.HostKeyCallbackHelper{HostKeyCallback: check}}, nil
	}
	switch {
	case a == nil:
		return nil, nil
	case a.token != "":
		return &githttp.TokenAuth{Token: a.token}, nil
	case a.username != "":
		return &githttp.BasicAuth{Username: a.username, Password: a.password}, nil
	}
	return nil, nil
}
