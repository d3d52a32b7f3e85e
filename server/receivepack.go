package server

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"

	"nuon.dev/nuon/schemas"
)

// receiveCaps are the receive-pack capabilities advertised: what git
// receive-pack supports, less deleting refs, atomic multi-ref pushes and
// push options, which an install never needs.
const receiveCaps = "report-status report-status-v2 side-band-64k quiet ofs-delta object-format=sha1 agent=nuon-server"

// Environment of the pre-receive hook.
const (
	envInstall  = "NUON_INSTALL"
	envAgentKey = "NUON_AGENT_KEY"
)

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

// readCommands reads a push's command list; raw is every byte read, to be
// replayed to git.
func readCommands(br *bufio.Reader) (cmds []pushCommand, caps []string, raw []byte, err error) {
	for {
		line, pk, err := readPkt(br)
		raw = append(raw, pk...)
		if errors.Is(err, errFlush) {
			return cmds, caps, raw, nil
		}
		if err != nil {
			return nil, nil, nil, err
		}
		s := strings.TrimSuffix(string(line), "\n")
		if c, rest, ok := strings.Cut(s, "\x00"); ok {
			s, caps = c, strings.Fields(rest)
		}
		f := strings.Fields(s)
		if len(f) != 3 || !isHash(f[0]) || !isHash(f[1]) {
			return nil, nil, nil, fmt.Errorf("bad command %q", truncate(s))
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

// receivePack checks a push's commands against the install, then runs git
// receive-pack with the pre-receive check, which verifies fast-forward and
// every new commit's signature before the ref moves.
func (s *Server) receivePack(w http.ResponseWriter, r *http.Request, install string) {
	var rd io.Reader = http.MaxBytesReader(w, r.Body, 256<<20)
	if r.Header.Get("Content-Encoding") == "gzip" {
		raw, err := body(r)
		if err != nil {
			http.Error(w, "nuon: read request: "+err.Error(), http.StatusBadRequest)
			return
		}
		rd = bytes.NewReader(raw)
	}
	br := bufio.NewReaderSize(rd, 64<<10)
	cmds, caps, raw, err := readCommands(br)
	if err != nil {
		s.refuse(install, "", "malformed push: "+err.Error())
		http.Error(w, "nuon: malformed push", http.StatusBadRequest)
		return
	}
	own := schemas.StatusRef(install)
	mu := s.installLock(install)
	mu.Lock()
	defer mu.Unlock()
	cur, _ := s.refs.get(own)
	for _, c := range cmds {
		reason := ""
		switch {
		case c.ref != own:
			reason = "an install may push only its own status ref " + own
		case c.new.IsZero():
			reason = "deleting the status ref is not allowed"
		case c.old != cur:
			reason = "stale: the status ref moved; fetch and push again"
		}
		if reason != "" {
			s.refuse(install, c.ref, reason)
			drain(br)
			reportRefusal(w, caps, cmds, reason)
			return
		}
	}
	if len(cmds) == 0 {
		reportRefusal(w, caps, nil, "")
		return
	}
	key, ok := s.keys.lookup(install)
	if !ok {
		s.refuse(install, own, "no agent key on main")
		drain(br)
		reportRefusal(w, caps, cmds, "install has no agent key")
		return
	}
	release, err := s.gitSlot(r.Context())
	if err != nil {
		return
	}
	defer release()
	// Every ref but the install's own is hidden from receive-pack, and the
	// repository's refs, which the quarantined push sees as an alternate's,
	// are limited to the install's own: git's connectivity check then reads
	// two refs instead of every ref of the fleet (it ran a for-each-ref of
	// all of them: 189 ms of git CPU per push at 100,000 installs), and git
	// itself refuses updates to hidden refs.
	cmd := exec.CommandContext(r.Context(), "git",
		"-c", "core.hooksPath="+s.hooks,
		"-c", "receive.denyDeletes=true",
		"-c", "receive.denyNonFastForwards=true",
		"-c", "receive.advertisePushOptions=false",
		// Housekeeping runs once per poll interval (Run), not after
		// every push.
		"-c", "receive.autogc=false",
		"-c", "receive.hideRefs=refs/",
		"-c", "receive.hideRefs=!"+schemas.InstallRef(install),
		"-c", "receive.hideRefs=!"+own,
		"-c", "core.alternateRefsPrefixes="+schemas.InstallRef(install)+" "+own,
		"receive-pack", "--stateless-rpc", s.cfg.Dir)
	cmd.Env = append(os.Environ(),
		envInstall+"="+install,
		envAgentKey+"="+authorizedKey(key),
	)
	cmd.Stdin = io.MultiReader(bytes.NewReader(raw), br)
	w.Header().Set("Content-Type", "application/x-git-receive-pack-result")
	w.Header().Set("Cache-Control", "no-cache")
	cmd.Stdout = w
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	runErr := cmd.Run()
	// receive-pack writes the ref it moves as a loose file.
	moved, ok := readLooseRef(s.cfg.Dir, own)
	if !ok {
		moved, _ = revParse(r.Context(), s.cfg.Dir, own)
	}
	if moved != cur && !moved.IsZero() {
		s.refs.set(own, moved)
		s.log.Info("status pushed", "install", install, "ref", own, "commit", moved.String())
		if s.mirror != nil {
			s.mirror.add(own)
		}
		return
	}
	reason := strings.TrimSpace(stderr.String())
	if runErr != nil && reason == "" {
		reason = runErr.Error()
	}
	s.refuse(install, own, "push not accepted: "+reason)
}

// reportRefusal answers a push with git's report-status, every command
// refused with reason ("" for an empty push), and the reason on the
// progress band so that git prints it as "remote: …".
func reportRefusal(w http.ResponseWriter, caps []string, cmds []pushCommand, reason string) {
	var rep []byte
	rep = pkt(rep, "unpack ok\n")
	for _, c := range cmds {
		rep = pkt(rep, "ng "+c.ref+" "+reason+"\n")
	}
	rep = append(rep, pktFlush...)
	w.Header().Set("Content-Type", "application/x-git-receive-pack-result")
	w.Header().Set("Cache-Control", "no-cache")
	if !hasCap(caps, "side-band-64k") {
		w.Write(rep)
		return
	}
	var b []byte
	if reason != "" {
		b = sideband(b, 2, []byte("nuon: refused: "+reason+"\n"))
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
func drain(r io.Reader) { _, _ = io.Copy(io.Discard, io.LimitReader(r, 256<<20)) }
