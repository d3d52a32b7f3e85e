package signature

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"golang.org/x/crypto/ssh"
)

// AllowedSigner is one line of an allowed_signers file: the principals
// (identities) a key may sign as.
type AllowedSigner struct {
	Principals []string
	// Namespaces limits the key to these signature namespaces; empty means
	// any.
	Namespaces []string
	Key        ssh.PublicKey
	// Line is the line in the file, for messages.
	Line int
}

// AllowedSigners is a parsed allowed_signers file (see ssh-keygen(1),
// "ALLOWED SIGNERS"), the file `git verify-commit` reads through
// gpg.ssh.allowedSignersFile.
type AllowedSigners struct {
	Signers []AllowedSigner
}

// LoadAllowedSigners reads and parses an allowed_signers file.
func LoadAllowedSigners(path string) (*AllowedSigners, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read trust file: %w", err)
	}
	as, err := ParseAllowedSigners(b)
	if err != nil {
		return nil, fmt.Errorf("trust file %s%w", path, err)
	}
	return as, nil
}

// ParseAllowedSigners parses the allowed_signers format: one key a line,
// "principals [options] keytype base64-key [comment]"; # starts a comment.
// Errors read ":LINE: message". Certificate authorities and validity
// windows are not supported and are refused rather than ignored.
func ParseAllowedSigners(data []byte) (*AllowedSigners, error) {
	as := &AllowedSigners{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		s, err := parseAllowedLine(line)
		if err != nil {
			return nil, fmt.Errorf(":%d: %w", n, err)
		}
		s.Line = n
		as.Signers = append(as.Signers, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf(": %w", err)
	}
	return as, nil
}

func parseAllowedLine(line string) (AllowedSigner, error) {
	var s AllowedSigner
	principals, rest := cutField(line)
	if principals == "" {
		return s, errors.New("missing principals")
	}
	for _, p := range strings.Split(principals, ",") {
		if p = strings.Trim(p, `"`); p != "" {
			s.Principals = append(s.Principals, p)
		}
	}
	if len(s.Principals) == 0 {
		return s, errors.New("missing principals")
	}
	// Options come before the key type; a key type never contains '='.
	if opts, after := cutField(rest); opts != "" && !isKeyType(opts) {
		for _, opt := range splitOptions(opts) {
			name, value, _ := strings.Cut(opt, "=")
			switch strings.ToLower(name) {
			case "namespaces":
				for _, ns := range strings.Split(strings.Trim(value, `"`), ",") {
					s.Namespaces = append(s.Namespaces, strings.TrimSpace(ns))
				}
			case "cert-authority", "valid-after", "valid-before":
				return s, fmt.Errorf("option %q is not supported", name)
			default:
				return s, fmt.Errorf("unknown option %q", name)
			}
		}
		rest = after
	}
	key, _, _, _, err := ssh.ParseAuthorizedKey([]byte(rest))
	if err != nil {
		return s, fmt.Errorf("public key: %w", err)
	}
	s.Key = key
	return s, nil
}

// cutField splits off the first whitespace-separated field, honouring
// double quotes.
func cutField(s string) (field, rest string) {
	s = strings.TrimLeft(s, " \t")
	quoted := false
	for i, r := range s {
		switch {
		case r == '"':
			quoted = !quoted
		case (r == ' ' || r == '\t') && !quoted:
			return s[:i], strings.TrimLeft(s[i:], " \t")
		}
	}
	return s, ""
}

func splitOptions(s string) []string {
	var out []string
	quoted, start := false, 0
	for i, r := range s {
		switch {
		case r == '"':
			quoted = !quoted
		case r == ',' && !quoted:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

func isKeyType(s string) bool {
	return strings.HasPrefix(s, "ssh-") || strings.HasPrefix(s, "ecdsa-") || strings.HasPrefix(s, "sk-")
}

// match returns the allowed signer that holds key for namespace ns.
func (as *AllowedSigners) match(key ssh.PublicKey, ns string) (AllowedSigner, bool) {
	want := key.Marshal()
	for _, s := range as.Signers {
		if !bytes.Equal(s.Key.Marshal(), want) {
			continue
		}
		if len(s.Namespaces) > 0 && !slices.Contains(s.Namespaces, ns) {
			continue
		}
		return s, true
	}
	return AllowedSigner{}, false
}
