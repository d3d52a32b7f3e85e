package reconciler

import "encoding/json"

// TypedNumbers replaces, in place, the json.Numbers in v (inputs decoded
// with UseNumber, so large integers stay exact) with int64 where the number
// is whole and float64 otherwise: the types templates and YAML encoders
// expect. It returns v.
func TypedNumbers(v any) any {
	switch v := v.(type) {
	case json.Number:
		if i, err := v.Int64(); err == nil {
			return i
		}
		f, _ := v.Float64()
		return f
	case map[string]any:
		for k, e := range v {
			v[k] = TypedNumbers(e)
		}
	case []any:
		for i, e := range v {
			v[i] = TypedNumbers(e)
		}
	}
	return v
}
