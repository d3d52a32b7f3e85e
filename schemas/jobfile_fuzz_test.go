package schemas

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func FuzzDecodeJob(f *testing.F) {
	f.Add([]byte(`{"apiVersion":"nuon.dev/v1","kind":"Job","id":"j1","install":"i","component":"c","operation":"create","plugin":"terraform","version":"1.0.0","generation":1,"commit":"0123456789abcdef0123456789abcdef01234567","timeout":"30m","stateDir":"/s","resultFile":"/r"}`))
	f.Add([]byte(`{"apiVersion":"nuon.dev/v1","kind":"Job","id":"j.2_x","install":"i","component":"c","operation":"delete","plugin":"helm","version":"2","generation":7,"commit":"0123456789abcdef0123456789abcdef01234567","timeout":"1h30m","stateDir":"s","resultFile":"r","inputs":{"a":[1,{"b":null}],"s":"${secrets.x}"},"artifacts":[{"name":"chart","source":"r.example/a@sha256:0000000000000000000000000000000000000000000000000000000000000000","local":"l.example/a@sha256:0000000000000000000000000000000000000000000000000000000000000000","digest":"sha256:0000000000000000000000000000000000000000000000000000000000000000"}],"helm":{"release":"x"}}`))
	f.Add([]byte(`{"apiVersion":"nuon.dev/v1","kind":"Job","id":"j1","install":"i","component":"c","operation":"update","plugin":"manifests","version":"1","generation":1,"commit":"0123456789abcdef0123456789abcdef01234567","timeout":"0s","stateDir":"/s","resultFile":"/r"}`))
	f.Add([]byte(`{"apiVersion":"nuon.dev/v1","kind":"Job","id":"d1","install":"i","component":"c","operation":"debug","plugin":"manifests","version":"1","generation":1,"commit":"0123456789abcdef0123456789abcdef01234567","timeout":"1m","stateDir":"/s","resultFile":"/r","debug":{"command":["logs","web-0","--tail","10"],"namespaces":["shop"],"maxBytes":4096,"timeout":"30s"}}`))
	f.Add([]byte(`{"apiVersion":"nuon.dev/v1","kind":"Job","id":"d2","install":"i","component":"c","operation":"drift","plugin":"terraform","version":"1","generation":1,"commit":"0123456789abcdef0123456789abcdef01234567","timeout":"1m","stateDir":"/s","resultFile":"/r","debug":{"command":["state","list"]}}`))
	f.Add([]byte(`{"apiVersion":"nuon.dev/v1","kind":"Job","id":"../../etc","operation":"upsert","timeout":"-1s"}`))
	f.Add([]byte(`{"kind":"Job","extra":true}`))
	f.Add([]byte(`{} {}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(``))
	f.Fuzz(func(t *testing.T, data []byte) {
		job, err := DecodeJob("manifest.json", data)
		if err != nil {
			if !errors.Is(err, ErrInvalidJob) {
				t.Fatalf("error %v does not wrap ErrInvalidJob", err)
			}
			return
		}
		if err := validateJob(job); err != nil {
			t.Fatalf("accepted manifest fails validate: %v", err)
		}
		if !jobID.MatchString(job.ID) {
			t.Fatalf("accepted id %q", job.ID)
		}
		b, err := json.Marshal(job)
		if err != nil {
			t.Fatal(err)
		}
		again, err := DecodeJob("manifest.json", b)
		if err != nil {
			t.Fatalf("re-encoded manifest rejected: %v\n%s", err, b)
		}
		// Empty inputs and artifacts are left out when encoded.
		if diff := cmp.Diff(job, again, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("round trip (-first +second):\n%s", diff)
		}
	})
}
