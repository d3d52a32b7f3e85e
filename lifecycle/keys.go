package lifecycle

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"os"
	"strings"

	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/internal/atomicfile"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/trust"
)

// keys makes the install's key pair unless it exists, and writes the
// agent's trust file from the render key.
func keys(_ context.Context, o *Options, st *state) (string, string, error) {
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return "", "", err
	}
	result := Unchanged
	key := o.path(KeyFile)
	signer, err := signature.LoadSigner(key)
	if os.IsNotExist(err) || (err != nil && !fileExists(key)) {
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return "", "", err
		}
		block, err := ssh.MarshalPrivateKey(priv, "nuon-"+o.ID)
		if err != nil {
			return "", "", err
		}
		if err := atomicfile.Write(key, pem.EncodeToMemory(block), 0o600); err != nil {
			return "", "", err
		}
		if signer, err = signature.LoadSigner(key); err != nil {
			return "", "", err
		}
		result = Done
	} else if err != nil {
		return "", "", fmt.Errorf("%s: %w", key, err)
	}
	pub := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey()))) + " nuon-" + o.ID
	st.publicKey = pub
	if changed, err := writeIfChanged(key+".pub", []byte(pub+"\n"), 0o644); err != nil {
		return "", "", err
	} else if changed {
		result = Done
	}

	if o.TrustRoot != "" {
		changed, err := keepTrustRoot(o)
		if err != nil {
			return "", "", err
		}
		if changed {
			result = Done
		}
		if o.RenderKey == "" {
			return result, pub, nil
		}
	}
	render, err := os.ReadFile(o.RenderKey)
	if err != nil {
		return "", "", fmt.Errorf("render key: %w", err)
	}
	fields := strings.Fields(string(render))
	if len(fields) < 2 {
		return "", "", fmt.Errorf("render key %s: not an OpenSSH public key", o.RenderKey)
	}
	trust := []byte("renderer " + fields[0] + " " + fields[1] + "\n")
	if _, err := signature.ParseAllowedSigners(trust); err != nil {
		return "", "", fmt.Errorf("render key %s: %w", o.RenderKey, err)
	}
	if changed, err := writeIfChanged(o.path(TrustFile), trust, 0o644); err != nil {
		return "", "", err
	} else if changed {
		result = Done
	}
	return result, pub, nil
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// writeIfChanged writes b to p unless p holds it already.
func writeIfChanged(p string, b []byte, mode os.FileMode) (bool, error) {
	if old, err := os.ReadFile(p); err == nil && bytes.Equal(old, b) {
		return false, nil
	}
	return true, atomicfile.Write(p, b, mode)
}

// keepTrustRoot copies the trust root's version given to create into the
// install's directory, once it is checked to be signed by a threshold of
// its own root keys.
func keepTrustRoot(o *Options) (bool, error) {
	data, err := os.ReadFile(o.TrustRoot)
	if err != nil {
		return false, fmt.Errorf("trust root: %w", err)
	}
	r, err := trust.Parse(o.TrustRoot, data)
	if err != nil {
		return false, fmt.Errorf("trust root: %w", err)
	}
	if err := trust.SelfSigned(r); err != nil {
		return false, fmt.Errorf("trust root: %w", err)
	}
	return writeIfChanged(o.path(TrustRootFile), data, 0o644)
}
