package request

// Seen is how many signatures v remembers, and for how many installs.
func Seen(v *Verifier) (entries, installs int) {
	if v.seen == nil {
		return 0, 0
	}
	return v.seen.len()
}
