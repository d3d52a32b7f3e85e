package plugin

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"nuon.dev/nuon/schemas"
)

// FuzzParseResponse: whatever a plugin writes, ParseResponse returns a
// response that answers the request in its protocol, or an error wrapping
// ErrProtocol; it never panics.
func FuzzParseResponse(f *testing.F) {
	for _, s := range []string{
		`{"apiVersion":"nuon.dev/v1","kind":"PluginResponse","protocol":1,"operation":"apply","outputs":{"a":1},"changed":true}`,
		`{"apiVersion":"nuon.dev/v1","kind":"PluginResponse","protocol":1,"operation":"apply","error":{"code":"failed","message":"x"}}`,
		`{"apiVersion":"nuon.dev/v1","kind":"PluginResponse","protocol":1,"operation":"handshake","plugin":{"apiVersion":"nuon.dev/v1","kind":"Plugin","name":"z","version":"1","protocols":[1],"operations":["apply"],"capabilities":{}}}`,
		`{"apiVersion":"nuon.dev/v1","kind":"PluginResponse","protocol":2,"operation":"apply"}`,
		`{"apiVersion":"nuon.dev/v1","kind":"PluginResponse","protocol":1,"operation":"drift","drift":[{"action":"changed"}],"plan":{"x":[1,2]}}`,
		``, `null`, `[]`, `{}`, `{"protocol":1e400}`, "\xff", `{"a":1} {"a":2}`,
	} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, data string, handshake bool) {
		req := &schemas.PluginRequest{APIVersion: schemas.APIVersion, Kind: schemas.KindPluginRequest, Protocol: 1, Protocols: []int{1}, Operation: schemas.PluginApply}
		if handshake {
			req.Operation = schemas.PluginHandshake
		}
		resp, err := ParseResponse(req, []byte(data))
		if err != nil {
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("error %v does not wrap ErrProtocol", err)
			}
			return
		}
		if resp.Operation != req.Operation || resp.Protocol != 1 {
			t.Fatalf("accepted a response to %s in protocol %d", resp.Operation, resp.Protocol)
		}
		if handshake && resp.Plugin == nil {
			t.Fatal("accepted a handshake without a manifest")
		}
	})
}

// FuzzPlanRecord: whatever plan a plugin answers an apply in record mode
// with, parsePlanRecord returns a record with a valid hash that encodes
// and reads back the same, or an error wrapping ErrProtocol.
func FuzzPlanRecord(f *testing.F) {
	hash := "sha256:" + strings.Repeat("a", 64)
	for _, s := range []string{
		`{"component":"db","hash":"` + hash + `","spec":"` + hash + `","job":"db-1","size":10,"summary":{"create":["a"]},"diff":"+ a"}`,
		`{"hash":"` + hash + `"}`, `{"hash":"sha256:xyz"}`, `{"hash":"` + hash + `","extra":1}`,
		`{"hash":"` + hash + `"} {}`, ``, `null`, `[]`, `"x"`, "\xff",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		rec, err := parsePlanRecord(json.RawMessage(data))
		if err != nil {
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("error %v does not wrap ErrProtocol", err)
			}
			return
		}
		if !schemas.ValidPlanHash(rec.Hash) {
			t.Fatalf("accepted hash %q", rec.Hash)
		}
		b, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		again, err := parsePlanRecord(b)
		if err != nil {
			t.Fatalf("re-read %s: %v", b, err)
		}
		if b2, _ := json.Marshal(again); !bytes.Equal(b, b2) {
			t.Fatalf("re-read %s as %s", b, b2)
		}
	})
}
