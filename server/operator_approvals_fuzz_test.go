package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"nuon.dev/nuon/requests"
	"nuon.dev/nuon/schemas"
)

// FuzzDecodeApprovalSubmission: whatever the body of POST ApprovalsPath,
// the decoder never panics; it accepts only a single signed approval whose
// file is a valid approval of an install, and refuses with 4xx otherwise.
func FuzzDecodeApprovalSubmission(f *testing.F) {
	now := time.Date(2026, 11, 27, 4, 0, 0, 0, time.UTC)
	a := schemas.Approval{APIVersion: schemas.APIVersion, Kind: schemas.KindApproval, Install: "acme", Component: "db",
		Plan: "sha256:" + strings.Repeat("3f", 32), Decision: schemas.DecisionApprove, Approver: "release-manager", Created: now, Expires: now.Add(time.Hour)}
	file, _ := json.MarshalIndent(a, "", "  ")
	good, _ := json.Marshal(schemas.SignedApproval{File: string(file) + "\n", Signature: "-----BEGIN SSH SIGNATURE-----\nAA==\n-----END SSH SIGNATURE-----\n"})
	f.Add(good)
	f.Add(append(append([]byte{}, good...), good...))
	f.Add([]byte(`{"file":"{}","signature":""}`))
	f.Add([]byte(`{"file":"","signature":"","extra":1}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, got, status, err := decodeApprovalSubmission(data)
		if err != nil {
			if status < 400 || status >= 500 {
				t.Fatalf("refused with %d: %v", status, err)
			}
			if len(data) > requests.MaxSubmission && status != http.StatusRequestEntityTooLarge {
				t.Fatalf("%d bytes refused with %d", len(data), status)
			}
			return
		}
		if status != http.StatusOK || got == nil || len(data) > requests.MaxSubmission {
			t.Fatalf("accepted with %d, approval %v, %d bytes", status, got, len(data))
		}
		again, err := schemas.DecodeApproval([]byte(s.File))
		if err != nil || again.Install != got.Install || again.Plan != got.Plan || !schemas.ValidPlanHash(got.Plan) {
			t.Fatalf("accepted an approval that does not decode the same: %v %+v %+v", err, again, got)
		}
	})
}
