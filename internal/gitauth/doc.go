// Package gitauth holds the credentials for the tenant repository, one
// set of options shared by the agent and every command that opens the
// repository (nuon agent, render, release, status, verify, and nuon
// server for its --upstream).
//
// # Where credentials come from
//
// Never from argv, where any user of the machine can read them, and never
// from the repository URL, which ends up in logs:
//
//   - HTTPS with a bearer token: --git-token-file FILE, or the NUON_GIT_TOKEN
//     environment variable.
//   - HTTPS with basic auth: --git-username NAME and --git-password-file
//     FILE, or the NUON_GIT_PASSWORD environment variable. Hosts that take
//     a token as a password (GitHub: user x-access-token) use this form.
//   - SSH: --ssh-key FILE, an unencrypted OpenSSH private key, and
//     --known-hosts FILE (default ~/.ssh/known_hosts). Host keys are always
//     checked: an unknown or changed host key is an error that says which.
//
// The same credentials serve every transport: go-git (GoGit), the agent's
// protocol client (Client) and the git command line (Env: an HTTP header
// through git's GIT_CONFIG_* environment, OpenSSH with the key alone
// through GIT_SSH_COMMAND), which nuon server runs for its upstream.
//
// An Auth never prints a secret: its String names the files it came from.
// Credentials go over plain http:// only to a loopback address. The
// commands remove NUON_GIT_TOKEN and NUON_GIT_PASSWORD from their
// environment once read, so the agent's jobs, which inherit it, never see
// them.
package gitauth
