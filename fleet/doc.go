// Package fleet reads what every install's agent reported: the status
// commit on refs/heads/nuon/status/<id>, checked against the install's own
// key (agentKey in installs/<id>.yaml on main), beside the install's
// desired ref. `nuon status` prints it as a table or JSON; the tenant
// server's fleet view shows the same rows.
//
// A status is trusted only when its commit is signed by that install's
// key: a row whose signature does not verify is shown with Verified false
// and the reason, never silently.
package fleet
