// Package redact keeps secrets out of everything nuon writes: git
// history is permanent, and job logs, results and status commits end up
// there. One Redactor, one Marker ("[redacted]"), for the agent and every
// job.
//
// # Secrets
//
// An install's secrets are the values of its NUON_SECRET_* environment
// variables (EnvPrefix; FromEnviron reads them). A value must have at
// least MinLen (8) bytes besides whitespace and be UTF-8 text (Check):
// a shorter one cannot be told apart from ordinary text, so
// reconciler.ResolveSecrets refuses to resolve it, with an error that
// names the secret and the minimum. An empty value is allowed; it has
// nothing to leak.
//
// # What is found
//
// Tools print a value in their own spelling, and wrap long lines. A
// Redactor looks for each secret in every form a tool may print it in:
// raw; Go's %q and %+q; JSON, with and without HTML-safe escaping
// (\u003c, \u0026, \u003e); HCL string escaping as terraform writes it
// (\", \\, \n, $${, %%{, \uNNNN); shell single quoting (either way of
// writing a quote inside it) and double quoting; each of those quoted once
// more by Go or JSON (an error that quotes the value, inside status.json or
// a quoted log attribute); base64, standard and URL alphabets, padded
// and not, at each of the three byte alignments a value can have inside
// a longer stream (a Kubernetes Secret's data), of the raw and the JSON
// spelling, and base64 of that base64 (a password in a dockerconfigjson).
//
// Matching runs on a copy of the text without whitespace and box-drawing
// characters (U+2500–U+257F), so a value that word wrapping split across
// lines, terraform's "│ " diagnostic frame included, is found whole; an
// index maps what is found back to the original text. Each form is cut
// into every fragment of MinLen+1 bytes, and a run of text made of such
// fragments is replaced as a whole, from its first to its last rune: a
// truncated or partly escaped copy goes too. Over-redacting is fine;
// leaking is not. After redaction, no fragment of more than MinLen bytes
// of any form of a secret is left in the text (FuzzRedact checks this).
//
// The search is a rolling hash per pattern length with a bit filter in
// front of the table: linear in the text, whatever the number and length
// of the secrets. BenchmarkRedact measures a 10 MB log with 10 secrets.
//
// # Use
//
// String, Bytes and Error redact whole texts; Writer redacts a stream,
// holding back at most the longest pattern (and the whitespace among it)
// until the next write or Close; Handler wraps a slog.Handler. A nil
// *Redactor redacts nothing.
package redact
