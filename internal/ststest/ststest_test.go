package ststest

import (
	"encoding/xml"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

type errorResponse struct {
	XMLName xml.Name `xml:"ErrorResponse"`
	Code    string   `xml:"Error>Code"`
}

// post sends a raw query-protocol request as the SDK would, signed by key.
func post(t testing.TB, s *Server, key string, form url.Values) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.URL+"/", strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")
	if key != "" {
		req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential="+key+"/20260101/us-east-1/sts/aws4_request, SignedHeaders=content-type;host;x-amz-date, Signature="+strings.Repeat("a", 64))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

func TestWire(t *testing.T) {
	s := New(t)
	s.AddCaller("AKIATENANT", "arn:aws:iam::111111111111:user/tenant")
	s.AddCaller("AKIAOTHER", "arn:aws:iam::333333333333:user/other")
	role := "arn:aws:iam::222222222222:role/nuon-acme-provision"
	s.AddRole(Role{ARN: role, TrustedAccount: "111111111111", ExternalID: "nuon-right-external-id"})
	form := func(extra ...string) url.Values {
		v := url.Values{"Action": {"AssumeRole"}, "Version": {"2011-06-15"}, "RoleArn": {role}, "RoleSessionName": {"nuon"}}
		for i := 0; i+1 < len(extra); i += 2 {
			v.Set(extra[i], extra[i+1])
		}
		return v
	}
	tests := []struct {
		name       string
		key        string
		form       url.Values
		wantStatus int
		wantCode   string
	}{
		{"assumed", "AKIATENANT", form("ExternalId", "nuon-right-external-id"), 200, ""},
		{"missing external id", "AKIATENANT", form(), 403, "AccessDenied"},
		{"wrong external id", "AKIATENANT", form("ExternalId", "nuon-wrong-external-id"), 403, "AccessDenied"},
		{"untrusted account", "AKIAOTHER", form("ExternalId", "nuon-right-external-id"), 403, "AccessDenied"},
		{"unknown key", "AKIANOBODY", form("ExternalId", "nuon-right-external-id"), 403, "InvalidClientTokenId"},
		{"unsigned", "", form("ExternalId", "nuon-right-external-id"), 403, "MissingAuthenticationToken"},
		{"bad duration", "AKIATENANT", form("ExternalId", "nuon-right-external-id", "DurationSeconds", "60"), 400, "ValidationError"},
		{"other action", "AKIATENANT", form("Action", "GetSessionToken"), 400, "InvalidAction"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := post(t, s, tt.key, tt.form)
			if status != tt.wantStatus {
				t.Fatalf("status %d, want %d: %s", status, tt.wantStatus, body)
			}
			if tt.wantCode == "" {
				var r assumeRoleResponse
				if err := xml.Unmarshal(body, &r); err != nil {
					t.Fatal(err)
				}
				if r.Result.Credentials.SessionToken == "" || !strings.HasPrefix(r.Result.User.Arn, "arn:aws:sts::222222222222:assumed-role/nuon-acme-provision/nuon") {
					t.Errorf("answer %s", body)
				}
				return
			}
			var e errorResponse
			if err := xml.Unmarshal(body, &e); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.wantCode, e.Code); diff != "" || e.XMLName.Local != "ErrorResponse" {
				t.Errorf("error %s: code (-want +got):\n%s", body, diff)
			}
		})
	}
	calls := s.Calls()
	if len(calls) != len(tests) {
		t.Fatalf("%d calls recorded, want %d", len(calls), len(tests))
	}
	if calls[1].ExternalID != "" || calls[2].ExternalID != "nuon-wrong-external-id" || calls[2].Code != "AccessDenied" {
		t.Errorf("calls recorded %+v", calls[1:3])
	}
}
