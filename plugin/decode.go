package plugin

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
)

// decodeStrict decodes exactly one JSON document into v, refusing
// unknown fields and anything after the document.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("more than one JSON document")
	}
	return nil
}
