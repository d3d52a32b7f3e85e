package server

import (
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
)

// FuzzParseHandover: any commit message either hands nothing over, is
// refused with an error, or names two ed25519 keys that read back the same.
func FuzzParseHandover(f *testing.F) {
	const k1 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPB0IpkSw+t6mCBLbAE/S6jl0iKppH6flWJtmIEozpHi"
	const k2 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIC9Y3xS+t8Wx5cTRCr3yio1okxjuXt1s3GSX57DtXUr8"
	f.Add("status\n\nNuon-Install: acme\n" + TrailerKeyHandover + ": " + k2 + "\n" + TrailerKeyRetired + ": " + k1 + "\n")
	f.Add("status\n\nNuon-Install: acme\n" + TrailerKeyHandover + ": " + k2 + "\n")
	f.Add("status\n\n" + TrailerKeyHandover + ": " + k2 + " " + k1 + "\n" + TrailerKeyRetired + ": ssh-rsa AAAA\n")
	f.Add("status\n")
	f.Fuzz(func(t *testing.T, msg string) {
		from, to, ok, err := parseHandover(msg)
		if !ok {
			if err != nil || from != nil || to != nil {
				t.Fatalf("nothing handed over, yet %v %v %v", from, to, err)
			}
			return
		}
		if err != nil {
			if from != nil || to != nil {
				t.Fatal("keys with an error")
			}
			return
		}
		for _, k := range []ssh.PublicKey{from, to} {
			if k.Type() != ssh.KeyAlgoED25519 {
				t.Fatalf("key type %s", k.Type())
			}
			back, _, _, _, err := ssh.ParseAuthorizedKey([]byte(authorizedKey(k)))
			if err != nil || authorizedKey(back) != authorizedKey(k) {
				t.Fatalf("key does not read back: %v", err)
			}
		}
		if !strings.Contains(msg, TrailerKeyRetired) {
			t.Fatal("hand-over accepted without the retired key")
		}
	})
}
