package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"nuon.dev/nuon/schemas"
)

// receiveCaps are the receive-pack capabilities advertised: what git
// receive-pack supports, less deleting refs, atomic multi-ref pushes and
// push options, which an install never needs. The report is the same
// lines in report-status and its v2.
const receiveCaps = "report-status report-status-v2 side-band-64k quiet ofs-delta object-format=sha1 agent=nuon-server"

// advertiseReceive writes the protocol v0 receive-pack advertisement with
// only the install's own refs, whatever the size of the fleet.
func (s *Server) advertiseReceive(w http.ResponseWriter, install string) {
	b := pkt(nil, "# service=git-receive-pack\n")
	b = append(b, pktFlush...)
	own := s.refs.own(install)
	if len(own) == 0 {
		b = pkt(b, plumbing.ZeroHash.String()+" capabilities^{}\x00"+receiveCaps+"\n")
	}
	for i, ref := range own {
		line := ref.hash.String() + " " + ref.name
		if i == 0 {
			line += "\x00" + receiveCaps
		}
		b = pkt(b, line+"\n")
	}
	b = append(b, pktFlush...)
	w.Header().Set("Content-Type", "application/x-git-receive-pack-advertisement")
	w.Header().Set("Cache-Control", "no-cache")
	w.Write(b)
}

// pushCommand is one "old new ref" line of a push.
type pushCommand struct {
	old, new plumbing.Hash
	ref      string
}

// Bounds of a push's command list, checked as it is read: a list is
// refused at the first line past them, before the rest is read, and
// nothing of it is echoed back.
const (
	// maxPushBody bounds the bytes of a push's body that are read
	// at all, gunzipped: what is past the command list and the pack
	// (maxPushPack) is only drained, so that git is told why.
	maxPushBody = 256 << 20
	// maxPushCommands is the most commands one push may carry. An
	// install pushes one (its own status ref); a few more are read so
	// that a push naming another ref is told why it is refused.
	maxPushCommands = 16
	// maxRefName is the longest ref name a command may carry. A status
	// ref is refs/heads/nuon/status/ and an install id; git itself keeps
	// a ref as a file, whose path PATH_MAX (4,096) bounds.
	maxRefName = 1024
	// maxCommandList bounds the command list's bytes, pkt-line headers
	// and capabilities included: 16 commands with the longest names and
	// git's capability list fit in it.
	maxCommandList = 32 << 10
)

// errCommandList is a command list past its bounds.
var errCommandList = errors.New("command list too large")

// readCommands reads a push's command list, up to its flush packet, and
// no byte past maxCommandList: a pkt-line whose length would cross it is
// refused from its four-byte header, before its payload is read.
func readCommands(br *bufio.Reader) (cmds []pushCommand, caps []string, err error) {
	budget := maxCommandList
	for {
		h, err := br.Peek(4)
		if err != nil {
			return nil, nil, err
		}
		if n, err := strconv.ParseUint(string(h), 16, 16); err == nil && int(n) > budget {
			return nil, nil, fmt.Errorf("%w: over %d bytes", errCommandList, maxCommandList)
		}
		line, pk, err := readPkt(br)
		budget -= len(pk)
		if errors.Is(err, errFlush) {
			return cmds, caps, nil
		}
		if err != nil {
			return nil, nil, err
		}
		if len(cmds) == maxPushCommands {
			return nil, nil, fmt.Errorf("%w: over %d commands", errCommandList, maxPushCommands)
		}
		s := strings.TrimSuffix(string(line), "\n")
		if c, rest, ok := strings.Cut(s, "\x00"); ok {
			s, caps = c, strings.Fields(rest)
		}
		f := strings.Fields(s)
		if len(f) != 3 || !isHash(f[0]) || !isHash(f[1]) {
			return nil, nil, errors.New("bad command")
		}
		if len(f[2]) > maxRefName {
			return nil, nil, fmt.Errorf("%w: a ref name over %d bytes", errCommandList, maxRefName)
		}
		cmds = append(cmds, pushCommand{old: plumbing.NewHash(f[0]), new: plumbing.NewHash(f[1]), ref: f[2]})
	}
}

// isHash reports whether s is a SHA-1 object id in lower-case hex.
func isHash(s string) bool {
	if len(s) != 40 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !(s[i] >= '0' && s[i] <= '9' || s[i] >= 'a' && s[i] <= 'f') {
			return false
		}
	}
	return true
}

func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

func (s *Server) installLock(install string) *sync.Mutex {
	m, _ := s.pushMu.LoadOrStore(install, &sync.Mutex{})
	return m.(*sync.Mutex)
}

// receivePack accepts or refuses a status push in-process: it checks the
// commands against the install, reads the pack into a quarantine in
// memory (go-git's parser), checks every new commit (checkPush), writes
// the objects as loose files and moves the ref (writeRef), then answers
// with git's report-status. Pushes of different installs run side by
// side; one install's pushes one at a time.
func (s *Server) receivePack(w http.ResponseWriter, r *http.Request, install string) {
	start := time.Now()
	// Streamed, never held whole: the command list and the pack are
	// read within their own bounds, the rest of a refused push drained.
	rd, err := limitBody(w, r, maxPushBody)
	if err != nil {
		s.refuse(install, "", reasonMalformed, "malformed push: "+err.Error())
		s.metrics.observePush(resultRefused, start)
		http.Error(w, "nuon: malformed push", http.StatusBadRequest)
		return
	}
	br := bufio.NewReaderSize(rd, 64<<10)
	cmds, caps, err := readCommands(br)
	if err != nil {
		// Nothing of what was sent is logged or answered: it may be
		// anything, of any size up to the bounds.
		code, text := reasonMalformed, "nuon: malformed push"
		if errors.Is(err, errCommandList) {
			code, text = reasonTooLarge, "nuon: push refused: "+err.Error()
		}
		s.refuse(install, "", code, "malformed push: "+err.Error())
		s.metrics.observePush(resultRefused, start)
		w.Header().Set("Connection", "close") // the rest of the body is not read
		http.Error(w, text, http.StatusBadRequest)
		return
	}
	own := schemas.StatusRef(install)
	mu := s.installLock(install)
	mu.Lock()
	defer mu.Unlock()
	if s.isArchived(install) {
		// Authenticated before its key left main, archived since.
		s.refuse(install, own, reasonArchived, archivedText)
		s.metrics.observePush(resultRefused, start)
		drain(br)
		reportRefusal(w, caps, cmds, archivedText)
		return
	}
	cur, _ := s.refs.get(own)
	for _, c := range cmds {
		reason, code := "", ""
		switch {
		case c.ref != own:
			reason, code = "an install may push only its own status ref "+own, reasonForeignRef
		case c.new.IsZero():
			reason, code = "deleting the status ref is not allowed", reasonDelete
		case c.old != cur:
			reason, code = "stale: the status ref moved; fetch and push again", reasonStale
		case len(cmds) > 1:
			reason, code = "one command per push", reasonMalformed
		}
		if reason != "" {
			s.refuse(install, c.ref, code, reason)
			s.metrics.observePush(resultRefused, start)
			drain(br)
			reportRefusal(w, caps, cmds, reason)
			return
		}
	}
	if len(cmds) == 0 {
		reportRefusal(w, caps, nil, "")
		return
	}
	c := cmds[0]
	key, ok := s.keys.lookup(install)
	if !ok {
		s.refuse(install, own, reasonNoKey, "no agent key on main")
		s.metrics.observePush(resultRefused, start)
		drain(br)
		reportRefusal(w, caps, cmds, "install has no agent key")
		return
	}
	release, err := s.pushSlot(r.Context())
	if err != nil {
		return
	}
	defer release()
	// What the push names but does not bring must be the install's own:
	// an object merely present in the repository does not count.
	q := newQuarantine(&closureSource{src: s.objects, tips: ownTips(s.refs.own(install))})
	pack, err := io.ReadAll(io.LimitReader(br, maxPushPack+1))
	if err == nil {
		err = q.readPack(pack)
	}
	if err != nil {
		code := reasonMalformed
		if errors.Is(err, errTooLarge) {
			code = reasonTooLarge
			drain(br)
		}
		s.refuse(install, own, code, "pack refused: "+err.Error())
		s.metrics.observePush(resultRefused, start)
		reportUnpack(w, caps, cmds, err.Error())
		return
	}
	rot, err := checkPushRotating(q, key, s.keys.rotationFor(install), install, c, func(k string) string { return s.keys.installUsing(k, install) })
	if err != nil {
		s.refuse(install, own, reasonNotAccepted, "push not accepted: "+err.Error())
		s.metrics.observePush(resultRefused, start)
		reportRefusal(w, caps, cmds, strings.TrimPrefix(err.Error(), ErrRefused.Error()+": "))
		return
	}
	if err := s.pushes.store(q, c); err != nil {
		if errors.Is(err, errStaleRef) || errors.Is(err, errRefLocked) {
			s.refuse(install, own, reasonStale, err.Error())
			s.metrics.observePush(resultRefused, start)
			reportRefusal(w, caps, cmds, "stale: the status ref moved; fetch and push again")
			return
		}
		s.log.Error("status push not written", "install", install, "ref", own, "error", err)
		s.metrics.observePush(resultError, start)
		reportRefusal(w, caps, cmds, "the server could not write the push; try again")
		return
	}
	if rot != nil {
		s.keys.handedOver(install, rot)
		s.log.Info("install key handed over", "install", install, "key", rot.fingerprint())
	}
	s.refs.set(own, c.new)
	s.rollouts.statusChanged(install)
	s.log.Info("status pushed", "install", install, "ref", own, "commit", c.new.String())
	if s.mirror != nil {
		s.mirror.add(own)
	}
	s.metrics.observePush(resultAccepted, start)
	writeReport(w, caps, "ok", []string{"ok " + c.ref}, "")
}

// pushSlot waits for a turn to hold a push in memory; release ends it. It
// fails when the request is cancelled first.
func (s *Server) pushSlot(ctx context.Context) (release func(), err error) {
	select {
	case s.pushSlots <- struct{}{}:
		return func() { <-s.pushSlots }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// reportRefusal answers a push with git's report-status, every command
// refused with reason ("" for an empty push), and the reason on the
// progress band so that git prints it as "remote: …".
func reportRefusal(w http.ResponseWriter, caps []string, cmds []pushCommand, reason string) {
	var lines []string
	for _, c := range cmds {
		lines = append(lines, "ng "+c.ref+" "+reason)
	}
	progress := ""
	if reason != "" {
		progress = "nuon: refused: " + reason
	}
	writeReport(w, caps, "ok", lines, progress)
}

// reportUnpack answers a push whose pack could not be read, as git does:
// the unpack status names the problem, every command fails.
func reportUnpack(w http.ResponseWriter, caps []string, cmds []pushCommand, problem string) {
	problem = strings.ReplaceAll(problem, "\n", " ")
	var lines []string
	for _, c := range cmds {
		lines = append(lines, "ng "+c.ref+" unpacker error")
	}
	writeReport(w, caps, problem, lines, "nuon: refused: "+problem)
}

// writeReport writes report-status: "unpack STATUS", one line per
// command, inside band 1 with side-band-64k (progress, if any, on band 2
// before it).
func writeReport(w http.ResponseWriter, caps []string, unpack string, lines []string, progress string) {
	var rep []byte
	rep = pkt(rep, "unpack "+unpack+"\n")
	for _, l := range lines {
		rep = pkt(rep, l+"\n")
	}
	rep = append(rep, pktFlush...)
	w.Header().Set("Content-Type", "application/x-git-receive-pack-result")
	w.Header().Set("Cache-Control", "no-cache")
	if !hasCap(caps, "side-band-64k") {
		w.Write(rep)
		return
	}
	var b []byte
	if progress != "" {
		b = sideband(b, 2, []byte(progress+"\n"))
	}
	b = sideband(b, 1, rep)
	b = append(b, pktFlush...)
	w.Write(b)
}

func hasCap(caps []string, c string) bool {
	for _, x := range caps {
		if x == c {
			return true
		}
	}
	return false
}

// drain reads what is left of a refused push (its pack), so that the
// client, which sends the whole body before it reads the answer, gets the
// refusal rather than a broken connection.
func drain(r io.Reader) { _, _ = io.Copy(io.Discard, io.LimitReader(r, maxPushBody)) }
