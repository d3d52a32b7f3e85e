package policy

import (
	"fmt"
	"time"

	"nuon.dev/nuon/schemas"
)

// LookAhead is how far Decide looks for the next opening: a year and a
// day, so a yearly window is always found.
const LookAhead = 366 * 24 * time.Hour

// maxSteps bounds the search for the next opening, whatever the windows.
const maxSteps = 100_000

// Decision is what the customer's policy says of a change at one instant.
type Decision struct {
	// Allowed says a change may be applied now.
	Allowed bool
	// Reason is schemas.DeferredHold or schemas.DeferredWindow when not
	// allowed.
	Reason string
	// Message says why, for a person and for the install's status.
	Message string
	// Window names the deny window in force, or the allow window that is
	// open or opens next; empty for a hold or when no window decides.
	Window string
	// Opens is when a change may next be applied, in the time zone of
	// the window that decides it: zero while allowed, under a hold (only
	// the customer lifts it), and when no opening comes within LookAhead.
	Opens time.Time
}

// Decide says whether the customer's policy c allows a change at now. A
// hold forbids every change. Otherwise a change is allowed when no deny
// window is open and, if there are allow windows, one of them is: deny
// wins. When it is not allowed, Opens is the first instant at which it
// will be, found by walking from one window boundary to the next.
func Decide(c *Customer, now time.Time) Decision {
	if c.Held {
		return Decision{Reason: schemas.DeferredHold, Message: "held by the customer: " + c.Hold}
	}
	ok, deny, allow := c.state(now)
	if ok {
		name := ""
		if allow != nil {
			name = allow.Name
		}
		return Decision{Allowed: true, Window: name}
	}
	d := Decision{Reason: schemas.DeferredWindow}
	if deny != nil {
		d.Window = deny.Name
		d.Message = fmt.Sprintf("inside deny window %q", deny.Name)
	} else {
		d.Message = "outside every allow window"
	}
	at, by, found := c.next(now)
	if !found {
		d.Message += fmt.Sprintf("; no window opens within %d days", int(LookAhead/(24*time.Hour)))
		return d
	}
	d.Opens = at.In(by.Location)
	if deny == nil {
		d.Window = by.Name
	}
	d.Message += fmt.Sprintf("; changes may go ahead at %s (%s)", d.Opens.Format(time.RFC3339), by.Name)
	return d
}

// state says whether a change is allowed at t, naming the deny window in
// force (the one that closes last) or the open allow window.
func (c *Customer) state(t time.Time) (ok bool, deny, allow *Window) {
	var denyEnd time.Time
	for i := range c.Deny {
		if open, end := c.Deny[i].open(t); open && end.After(denyEnd) {
			deny, denyEnd = &c.Deny[i], end
		}
	}
	for i := range c.Allow {
		if open, _ := c.Allow[i].open(t); open {
			allow = &c.Allow[i]
			break
		}
	}
	return deny == nil && (len(c.Allow) == 0 || allow != nil), deny, allow
}

// next finds the first instant after now at which a change is allowed,
// and the window that decides it: the allow window then open, or the deny
// window then ending when there are no allow windows.
func (c *Customer) next(now time.Time) (time.Time, *Window, bool) {
	limit := now.Add(LookAhead)
	t := now
	var last *Window
	for range maxSteps {
		if t.After(limit) {
			return time.Time{}, nil, false
		}
		ok, deny, allow := c.state(t)
		switch {
		case ok && allow != nil:
			return t, allow, true
		case ok:
			return t, last, true
		case deny != nil:
			// Nothing opens before every deny window in force ends.
			var end time.Time
			for i := range c.Deny {
				if open, e := c.Deny[i].open(t); open && e.After(end) {
					end, last = e, &c.Deny[i]
				}
			}
			t = end
		default:
			// Outside every allow window: the next start of one.
			var first time.Time
			for i := range c.Allow {
				if s, ok := c.Allow[i].nextStart(t, limit); ok && (first.IsZero() || s.Before(first)) {
					first = s
				}
			}
			if first.IsZero() {
				return time.Time{}, nil, false
			}
			t = first
		}
	}
	return time.Time{}, nil, false
}
