package gitproto

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/revlist"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// RefUpdate moves one ref on the server from Old (zero: the ref must not
// exist) to New; a zero New deletes the ref, which must be at Old. Old of
// a deletion must be an object the server has: git's receive-pack drops
// the check of an old value it cannot parse ("allowing deletion of
// corrupt ref"), so name the commit read from the server.
type RefUpdate struct {
	Name     plumbing.ReferenceName
	Old, New plumbing.Hash
}

// ErrStale is wrapped by push errors for a ref that is no longer at the
// RefUpdate's Old: read it again and retry.
var ErrStale = errors.New("ref moved since it was read")

// PushError is a push the server refused in part or whole: the pack could
// not be unpacked, or refs were not updated. Messages are what the server
// wrote on the sideband while it worked, its hooks' output among them.
type PushError struct {
	// Unpack is the server's complaint about the pack, empty if it took it.
	Unpack string
	// Refs are the refused refs, each with the server's reason.
	Refs []RefStatus
	// Messages are the server's messages, "remote:" lines without the
	// prefix.
	Messages []string
}

// RefStatus is one ref's line of a report-status: Reason is empty when
// the ref was updated.
type RefStatus struct {
	Name   plumbing.ReferenceName
	Reason string
}

func (e *PushError) Error() string {
	var parts []string
	if e.Unpack != "" {
		parts = append(parts, "unpack: "+e.Unpack)
	}
	for _, r := range e.Refs {
		parts = append(parts, fmt.Sprintf("%s rejected: %s", r.Name, r.Reason))
	}
	if len(e.Messages) > 0 {
		parts = append(parts, "remote says: "+strings.Join(e.Messages, " | "))
	}
	return strings.Join(parts, "; ")
}

// Is makes errors.Is(err, ErrStale) hold when a ref was refused because it
// moved: git's "non-fast-forward", "fetch first" and "stale info" reasons,
// or a failed compare-and-swap ("cannot lock ref ... but expected", or
// "unable to resolve reference" for a ref expected at a value and gone).
func (e *PushError) Is(target error) bool {
	if target != ErrStale {
		return false
	}
	for _, r := range e.Refs {
		for _, s := range []string{"non-fast-forward", "fetch first", "stale info"} {
			if strings.Contains(r.Reason, s) {
				return true
			}
		}
	}
	for _, m := range e.Messages {
		if strings.Contains(m, "but expected") || strings.Contains(m, "unable to resolve reference") {
			return true
		}
	}
	return false
}

// Push moves refs on the server with git-receive-pack, sending the objects
// reachable from the new values that are not reachable from the old ones
// (those st has): go-git's pack encoder builds the pack, this client sends
// it with the commands and reads report-status, so that every request goes
// through the Client's transport (its *http.Client over HTTP). Every
// refused ref is in the returned *PushError, with the server's reason and
// its hooks' messages; errors.Is(err, ErrStale) says a ref moved. Over
// SSH a ref that moved is noticed from the advertisement before anything
// is sent. With the "atomic" capability, which git servers offer, the
// server moves all refs or none. An update with a zero New deletes its
// ref (git's delete-refs); a push of deletions only sends no pack.
func (c *Client) Push(ctx context.Context, st storer.EncodedObjectStorer, updates ...RefUpdate) error {
	if len(updates) == 0 {
		return nil
	}
	t, err := c.transport()
	if err != nil {
		return err
	}
	pack, err := buildPack(st, updates)
	if err != nil {
		return fmt.Errorf("push %s: %w", c.redacted(), err)
	}
	var report *PushError
	err = t.receivePack(ctx, &pushCall{
		request: func(adv *v0Advertisement) ([]byte, error) {
			return pushRequest(adv, updates, pack)
		},
		read: func(p *pktReader) error {
			var err error
			report, err = readPushResponse(p)
			return err
		},
	})
	if err == nil && report != nil {
		err = report
	}
	if err != nil {
		return fmt.Errorf("push %s: %w", c.redacted(), err)
	}
	return nil
}

// buildPack encodes the objects the updates need, or nil when every update
// is a deletion.
func buildPack(st storer.EncodedObjectStorer, updates []RefUpdate) ([]byte, error) {
	var wants, haves []plumbing.Hash
	for _, u := range updates {
		if !u.New.IsZero() {
			wants = append(wants, u.New)
		}
		if !u.Old.IsZero() && st.HasEncodedObject(u.Old) == nil {
			haves = append(haves, u.Old)
		}
	}
	if len(wants) == 0 {
		return nil, nil
	}
	objs, err := revlist.Objects(st, wants, haves)
	if err != nil {
		return nil, fmt.Errorf("list objects to send: %w", err)
	}
	var buf bytes.Buffer
	if _, err := packfile.NewEncoder(&buf, st, false).Encode(objs, 10); err != nil {
		return nil, fmt.Errorf("encode pack: %w", err)
	}
	return buf.Bytes(), nil
}

// pushRequest encodes the commands, "<old> <new> <ref>", the first with
// the capabilities, a flush and the pack. Without an advertisement (HTTP)
// it asks for report-status, side-band-64k and atomic, which git's
// receive-pack offers and servers without them ignore.
func pushRequest(adv *v0Advertisement, updates []RefUpdate, pack []byte) ([]byte, error) {
	caps := []string{"report-status", "side-band-64k", "atomic", "quiet", "agent=" + userAgent}
	if adv != nil {
		for _, u := range updates {
			if cur := adv.refs[u.Name]; cur != u.Old {
				return nil, &PushError{Refs: []RefStatus{{Name: u.Name, Reason: fmt.Sprintf("stale info: it is at %s, not %s", short(cur), short(u.Old))}}}
			}
		}
		caps = slicesFilter(caps, func(s string) bool {
			name, _, _ := strings.Cut(s, "=")
			return adv.caps.Supports(name)
		})
		if !adv.caps.Supports("report-status") {
			return nil, fmt.Errorf("%w: receive-pack without report-status", ErrUnsupported)
		}
		for _, u := range updates {
			if u.New.IsZero() && !adv.caps.Supports("delete-refs") {
				return nil, fmt.Errorf("%w: receive-pack without delete-refs cannot delete %s", ErrUnsupported, u.Name)
			}
		}
	}
	var buf bytes.Buffer
	w := &pktWriter{w: &buf}
	for i, u := range updates {
		if strings.ContainsAny(u.Name.String(), " \n\x00") {
			return nil, fmt.Errorf("ref name %q has a space, newline or NUL", u.Name)
		}
		cmd := u.Old.String() + " " + u.New.String() + " " + u.Name.String()
		if i == 0 {
			cmd += "\x00" + strings.Join(caps, " ")
		}
		w.data([]byte(cmd + "\n"))
	}
	if err := w.flush(); err != nil {
		return nil, err
	}
	buf.Write(pack)
	return buf.Bytes(), nil
}

func short(h plumbing.Hash) string {
	if h.IsZero() {
		return "(absent)"
	}
	return h.String()[:12]
}

func slicesFilter(in []string, keep func(string) bool) []string {
	var out []string
	for _, s := range in {
		if keep(s) {
			out = append(out, s)
		}
	}
	return out
}

// readPushResponse reads receive-pack's answer: with side-band-64k the
// report-status pkt-lines come inside band 1, the messages on band 2. It
// returns a *PushError when the report says something failed.
func readPushResponse(p *pktReader) (*PushError, error) {
	var messages []string
	var report bytes.Buffer
	sb := newSidebandReader(p)
	sb.progress = func(b []byte) {
		for _, line := range strings.FieldsFunc(string(b), func(r rune) bool { return r == '\n' || r == '\r' }) {
			if len(messages) < 50 {
				messages = append(messages, strings.ToValidUTF8(line, "?"))
			}
		}
	}
	// The whole report is small: read it all, then parse its pkt-lines.
	if _, err := report.ReadFrom(limitReader(sb, 1<<20)); err != nil {
		if re, ok := errors.AsType[*RemoteError](err); ok && len(messages) > 0 {
			re.Message += " (" + strings.Join(messages, " | ") + ")"
		}
		return nil, err
	}
	return readReportStatus(newPktReader(&report), messages)
}

// readReportStatus parses a report-status (gitprotocol-pack): "unpack ok"
// or "unpack <reason>", then "ok <ref>" or "ng <ref> <reason>" per
// command, then a flush.
func readReportStatus(p *pktReader, messages []string) (*PushError, error) {
	kind, line, err := p.line()
	switch {
	case err != nil:
		return nil, err
	case kind != pktData || !strings.HasPrefix(line, "unpack "):
		return nil, protocolErrorf("report-status starts with %q", truncate(line))
	}
	perr := &PushError{Messages: messages}
	if u := strings.TrimPrefix(line, "unpack "); u != "ok" {
		perr.Unpack = u
	}
	for {
		kind, line, err := p.line()
		switch {
		case err != nil:
			return nil, err
		case kind == pktFlush:
			if perr.Unpack == "" && len(perr.Refs) == 0 {
				return nil, nil
			}
			return perr, nil
		case kind != pktData:
			return nil, protocolErrorf("%s in report-status", kind)
		}
		verb, rest, _ := strings.Cut(line, " ")
		switch verb {
		case "ok":
			if rest == "" {
				return nil, protocolErrorf("bad report-status line %q", truncate(line))
			}
		case "ng":
			name, reason, _ := strings.Cut(rest, " ")
			if name == "" {
				return nil, protocolErrorf("bad report-status line %q", truncate(line))
			}
			if reason == "" {
				reason = "rejected"
			}
			perr.Refs = append(perr.Refs, RefStatus{Name: plumbing.ReferenceName(name), Reason: reason})
		default:
			return nil, protocolErrorf("bad report-status line %q", truncate(line))
		}
	}
}
