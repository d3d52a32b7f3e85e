package trust

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/hiddeco/sshsig"
	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/schemas"
)

// Encode writes a new, unsigned version of the root: signed as the file's
// signed content and no signatures. Parse it to check it before signing.
func Encode(signed schemas.TrustRoot) ([]byte, error) {
	raw, err := json.Marshal(signed)
	if err != nil {
		return nil, fmt.Errorf("encode root: %w", err)
	}
	return encode(raw, nil)
}

// Sign adds key's signature to r and returns the new file. The signed
// content is kept exactly as it was written, so the signatures of other
// key holders stay good; a signature key made before is replaced. Sign
// does not check that key is a root key: a holder may sign before the
// version naming its key is final, and Verify decides what counts.
func Sign(r *Root, key ssh.Signer) ([]byte, error) {
	sig, err := sshsig.Sign(bytes.NewReader(r.signed), key, sshsig.HashSHA512, Namespace)
	if err != nil {
		return nil, fmt.Errorf("sign %s: %w", r, err)
	}
	fp := ssh.FingerprintSHA256(key.PublicKey())
	sigs := slices.DeleteFunc(slices.Clone(r.Signatures), func(s Signature) bool { return s.Fingerprint == fp })
	sigs = append(sigs, Signature{Fingerprint: fp, sig: sig})
	return encode(r.rawSigned, sigs)
}

// Encoded returns r's file as Sign writes it: the signed content as
// written, indented, and its signatures.
func (r *Root) Encoded() ([]byte, error) { return encode(r.rawSigned, r.Signatures) }

// encode writes the file: two-space indentation, the signed content
// first, a newline at the end.
func encode(rawSigned []byte, sigs []Signature) ([]byte, error) {
	list := make([]schemas.TrustSignature, len(sigs))
	for i, s := range sigs {
		list[i] = schemas.TrustSignature{KeyID: s.Fingerprint, Sig: string(sshsig.Armor(s.sig))}
	}
	file := struct {
		Signed     json.RawMessage          `json:"signed"`
		Signatures []schemas.TrustSignature `json:"signatures"`
	}{rawSigned, list}
	b, err := json.Marshal(file)
	if err != nil {
		return nil, fmt.Errorf("encode root: %w", err)
	}
	var ind bytes.Buffer
	if err := json.Indent(&ind, b, "", "  "); err != nil {
		return nil, fmt.Errorf("encode root: %w", err)
	}
	ind.WriteByte('\n')
	return ind.Bytes(), nil
}
