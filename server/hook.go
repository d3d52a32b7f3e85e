package server

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"
)

// DefaultHookInterval is the least time between two checks of main that
// webhooks start (Config.HookInterval). A check with an upstream is a
// fetch from the git host and some milliseconds of CPU; a git host sends
// one hook per push, so a burst is a replay or a flood.
const DefaultHookInterval = time.Second

// maxHookBody bounds a webhook's body, which is read only to check its
// signature, streamed, never held: GitHub's own cap on a payload.
const maxHookBody = 25 << 20

// Webhook headers the big git hosts send.
const (
	// hookSignatureHeader is GitHub's (and Gitea's, Forgejo's):
	// "sha256=" and the hex HMAC-SHA256 of the body under the secret.
	hookSignatureHeader = "X-Hub-Signature-256"
	// hookTokenHeader is GitLab's: the secret itself.
	hookTokenHeader = "X-Gitlab-Token"
)

// errHook is a webhook without a valid signature or token.
var errHook = errors.New("webhook not signed with the hook secret")

// webhook asks the follower to check main now. The hook carries nothing
// the server trusts (main is fetched from the upstream, not read from the
// hook), but each check costs a fetch: the hook must prove it comes from
// the git host, by the HMAC of its body or the secret (checkHook), and a
// burst of hooks makes one check (settleHooks).
func (s *Server) webhook(w http.ResponseWriter, r *http.Request) {
	if err := s.checkHook(w, r); err != nil {
		s.log.Warn("webhook refused", "remote", r.RemoteAddr, "reason", err.Error())
		s.metrics.refused(reasonHook)
		http.Error(w, "nuon: "+err.Error(), http.StatusUnauthorized)
		return
	}
	select {
	case s.wake <- struct{}{}:
	default: // a check is asked for already
	}
	w.WriteHeader(http.StatusAccepted)
}

// checkHook accepts a hook that carries the HookSecret as the git hosts
// send it: GitHub's X-Hub-Signature-256 (an HMAC-SHA256 of the body) or
// GitLab's X-Gitlab-Token (the secret), each compared in constant time.
// Without a secret only HookOpen lets a hook through.
func (s *Server) checkHook(w http.ResponseWriter, r *http.Request) error {
	secret := []byte(s.cfg.HookSecret)
	if len(secret) == 0 {
		if s.cfg.HookOpen {
			return nil
		}
		return errors.New("no webhook secret is configured (nuon server --hook-secret-file)")
	}
	if tok := r.Header.Get(hookTokenHeader); tok != "" {
		if subtle.ConstantTimeCompare([]byte(tok), secret) != 1 {
			return errHook
		}
		return nil
	}
	sig, ok := strings.CutPrefix(r.Header.Get(hookSignatureHeader), "sha256=")
	if !ok {
		return errHook
	}
	want, err := hex.DecodeString(sig)
	if err != nil || len(want) != sha256.Size {
		return errHook
	}
	mac := hmac.New(sha256.New, secret)
	if _, err := io.Copy(mac, http.MaxBytesReader(w, r.Body, maxHookBody)); err != nil {
		return errors.New("webhook body unreadable or over 25 MiB")
	}
	if !hmac.Equal(mac.Sum(nil), want) {
		return errHook
	}
	return nil
}

// settleHooks waits, after a hook woke the follower, until HookInterval has
// passed since the last check a hook started (at once if it has), then
// takes every hook that came meanwhile as answered by the check about to
// run. False when ctx ended.
func (s *Server) settleHooks(ctx context.Context, last time.Time) bool {
	if d := s.cfg.HookInterval - time.Since(last); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
	select {
	case <-s.wake:
	default:
	}
	return true
}

// SignHook is the X-Hub-Signature-256 value of body under secret, as
// GitHub computes it: for tests and for scripts that post the hook.
func SignHook(secret string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}
