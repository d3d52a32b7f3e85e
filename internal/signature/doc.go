// Package signature makes and checks the SSH signatures on nuon's commits.
//
// Commits are signed the way `git commit -S` signs them with
// gpg.format=ssh: an armored SSH signature (namespace "git") over the commit
// encoded without its signature, stored in the commit's gpgsig header. Stock
// git verifies them with `git -c gpg.ssh.allowedSignersFile=F
// verify-commit`, and this package verifies them against the same
// allowed_signers file format.
package signature
