package helm

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"

	"nuon.dev/nuon/reconciler"
)

// chartValues returns the job's inputs as Helm values: a copy normalised to
// what JSON holds (numbers as int64 or float64), with every
// ${secrets.NAME} resolved (see reconciler.ResolveSecrets).
func chartValues(inputs map[string]any, lookup func(string) (string, bool)) (map[string]any, error) {
	b, err := json.Marshal(inputs)
	if err != nil {
		return nil, fmt.Errorf("values: %w", err)
	}
	var vals map[string]any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&vals); err != nil {
		return nil, fmt.Errorf("values: %w", err)
	}
	vals, _, err = reconciler.ResolveSecrets(vals, lookup)
	if err != nil {
		return nil, err
	}
	return reconciler.TypedNumbers(vals).(map[string]any), nil
}

// specHash identifies what a release was made from: the chart's digest and
// the values, secrets included (only the hash leaves the job). It fits a
// label value.
func specHash(chartDigest string, vals map[string]any) string {
	b, _ := json.Marshal(vals) // map keys are sorted
	h := sha256.New()
	io.WriteString(h, chartDigest)
	h.Write([]byte{0})
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))[:40]
}
