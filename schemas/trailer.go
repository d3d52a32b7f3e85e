package schemas

import "strings"

// Trailer returns the value of the last "Key: value" trailer in the final
// paragraph of a commit message, as `git interpret-trailers` reads it.
func Trailer(msg, key string) (string, bool) {
	msg = strings.TrimRight(msg, "\n")
	if i := strings.LastIndex(msg, "\n\n"); i >= 0 {
		msg = msg[i+2:]
	}
	val, found := "", false
	for _, line := range strings.Split(msg, "\n") {
		if k, v, ok := strings.Cut(line, ": "); ok && k == key {
			val, found = strings.TrimSpace(v), true
		}
	}
	return val, found
}
