//go:build race

package policy

// raceEnabled: the race detector slows the schedule test tenfold, and
// Decide shares nothing between goroutines, so it asks fewer questions.
const raceEnabled = true
