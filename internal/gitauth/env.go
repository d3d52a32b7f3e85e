package gitauth

import (
	"encoding/base64"
	"fmt"
	"net/url"
	"os"
	"strings"
	"syscall"

	"nuon.dev/nuon/internal/gitproto"
)

// Env is the environment that gives the git command line a's credentials
// for location; append it to the command's environment. Credentials never
// go in git's arguments, which any user of the machine can read, nor in
// the URL, which git prints in its messages:
//
//   - https:// (and loopback http://): the token or the user name and
//     password as an Authorization header (http.extraHeader, set through
//     GIT_CONFIG_COUNT, GIT_CONFIG_KEY_0 and GIT_CONFIG_VALUE_0);
//   - ssh:// and user@host:path: GIT_SSH_COMMAND runs OpenSSH with the key
//     file alone (no agent, no ~/.ssh/config) and checks the host key
//     against the known_hosts file (StrictHostKeyChecking=yes);
//   - always GIT_TERMINAL_PROMPT=0: refused credentials are an error,
//     never a prompt.
//
// It fails as Check does, and for an SSH location without --ssh-key or
// with a key file others can read (OpenSSH would ignore it).
func (a *Auth) Env(location string) ([]string, error) {
	if err := a.Check(location); err != nil {
		return nil, err
	}
	env := []string{"GIT_TERMINAL_PROMPT=0"}
	if ep, ok, err := gitproto.ParseSSH(location); ok {
		if err != nil {
			return nil, err
		}
		if a.SSH() == nil {
			return nil, fmt.Errorf("repository %s: an ssh repository needs --ssh-key", ep)
		}
		if err := privateFile(a.keyFile); err != nil {
			return nil, err
		}
		cmd := []string{"ssh", "-F", "/dev/null", "-i", a.keyFile,
			"-o", "IdentitiesOnly=yes", "-o", "IdentityAgent=none", "-o", "BatchMode=yes",
			"-o", "StrictHostKeyChecking=yes", "-o", "UserKnownHostsFile=" + a.knownHosts,
			"-o", "GlobalKnownHostsFile=/dev/null"}
		for i, c := range cmd {
			cmd[i] = shellQuote(c)
		}
		return append(env, "GIT_SSH_COMMAND="+strings.Join(cmd, " ")), nil
	}
	if u, err := url.Parse(location); err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return env, nil // a local path: no credentials
	}
	var header string
	switch {
	case a == nil:
	case a.token != "":
		header = "Authorization: Bearer " + a.token
	case a.username != "":
		header = "Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(a.username+":"+a.password))
	}
	if header != "" {
		env = append(env, "GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=http.extraHeader", "GIT_CONFIG_VALUE_0="+header)
	}
	return env, nil
}

// privateFile fails when OpenSSH would refuse file as a private key: it
// is the user's own and others may read it.
func privateFile(file string) error {
	fi, err := os.Stat(file)
	if err != nil {
		return fmt.Errorf("ssh key: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if ok && int(st.Uid) == os.Getuid() && fi.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("ssh key %s: others can read it (mode %04o), so ssh ignores it: chmod 600 it (Kubernetes: defaultMode: 0400)", file, fi.Mode().Perm())
	}
	return nil
}

// shellQuote quotes s for sh, which runs GIT_SSH_COMMAND.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=./:") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
