// Package policy holds the rules that decide, inside an install, whether
// a change may be applied: today the customer's own policy, a file the
// customer keeps in the install (in Kubernetes a ConfigMap mounted into
// the agent) that nothing on main can override.
//
// # The customer's policy
//
// The file is YAML (or JSON), checked against
// schemas/customer-policy.schema.json and then by [Parse], which reports
// every problem at its file, line and field:
//
//	apiVersion: nuon.dev/v1
//	kind: CustomerPolicy
//	timezone: Europe/Berlin            # of every window that names none
//	allow:                             # none: any time no deny window covers
//	  - name: weeknights
//	    days: [mon, tue, wed, thu]
//	    start: "22:00"
//	    duration: 6h
//	  - name: first-sunday
//	    cron: "0 3 1-7 * *"            # five standard fields, robfig/cron
//	    duration: 4h
//	    timezone: America/New_York
//	deny:                              # deny wins over allow
//	  - name: year-end-freeze
//	    cron: "0 0 15 12 *"
//	    duration: 432h
//	hold:                              # while present: no change at all
//	  reason: quarterly audit, ask ops@acme.example
//	requests: true                     # false: refuse logs and debug requests
//	approvers:                         # pinned here, never on main
//	  - name: alice@acme.example
//	    key: ssh-ed25519 AAAAC3Nza… alice@acme.example
//	requireApproval:                   # these changes need an approver's approval too
//	  components: [database]           # none: every component
//	  changes: [delete, replace]       # none: any change (a no-op never waits)
//
// A window is weekly (days and start, HH:MM) or cron (not both), with a
// duration of whole minutes from 1m to 366 days and an IANA time zone of
// its own or the file's; the zone database is compiled in (time/tzdata),
// so it does not depend on the agent's machine, and "Local" is refused. A
// window of no time, with an unknown zone, a cron expression that does
// not parse (or @every, or TZ= inside it) or one that names no day that
// exists (30 February) is an error. Overlapping allow windows are fine;
// where an allow and a deny window overlap, deny wins. Note cron's day
// rule: when both the day of the month and the day of the week are given,
// either one matches ("0 3 1-7 * sun" is every day 1-7 and every Sunday).
//
// The approvers' keys (ssh-ed25519, sk-ssh-ed25519@openssh.com, ECDSA
// P-256/384/521, sk-ecdsa) are each listed once. A plan that makes a
// change requireApproval names (Customer.Needs) needs, in addition to the
// vendor's approval, one signed by an approver's key (Customer.ApprovalKeys):
// an approval file as `nuon approve` signs it, filed inside the install
// (the agent reads NAME.approval.json beside this file). A key the vendor
// trusts in any way (trust/approvals, render, request keys) never counts
// as the customer's, even pinned here. requireApproval without approvers
// is an error: nothing could ever approve.
//
// # Clocks
//
// A window opens at each of its start times as the window's clock shows
// them and stays open for its duration in elapsed time. Where a change of
// clocks skips a start time, the window opens at the jump (once, however
// many start times the gap held); where it repeats one, the window opens
// at its first occurrence only. So a window on the night the clocks
// change neither goes missing nor opens twice.
//
// # Deciding
//
// [Decide] is a pure function of the policy and an instant: a hold
// forbids every change; otherwise a change is allowed when no deny window
// is open and, if there are allow windows, one of them is. When it is not,
// the decision says why (schemas.DeferredHold or schemas.DeferredWindow)
// and when a change may next go ahead (Opens), found by walking from one
// window boundary to the next, up to [LookAhead]. A test checks Decide
// against a minute-by-minute evaluation of these rules over random
// policies in six zones around clock changes, and finds no decision that
// allows a change the rules forbid.
//
// Measured (BenchmarkDecide, BenchmarkParse; one core of a shared AMD
// EPYC): a decision on the example above takes about 12-17 µs, one on
// 50 allow and 50 deny cron windows about 0.3 ms, and reading the file
// about 0.25 ms: nothing next to a poll of the tenant's repository, so
// the agent reads the file and decides again on every pass.
//
// # In the agent
//
// The agent reads the file again on every pass. Outside a window or under
// a hold it applies nothing (no component change, no drift correction, no
// sandbox upgrade) and records the change as deferred in its signed
// status; a file that is missing or does not parse holds the install, and
// the status says why: a broken file is never read as "no rules".
package policy
