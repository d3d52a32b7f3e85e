package server

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os/exec"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
)

// fetch answers a protocol v2 fetch from the install's closure: the plan
// (planFetch) is computed in the server from the objects reachable from
// the install's two refs, then written; git pack-objects only packs the
// objects the plan lists, given by id. git upload-pack is not run: it
// answers from the whole repository (ACKs for any object, unshallow for
// any commit named), which no filtering of request lines makes safe.
func (s *Server) fetch(w http.ResponseWriter, r *http.Request, req v2Request, install string) {
	args, err := parseFetchArgs(req.args)
	if err != nil {
		s.refuseFetch(w, install, reasonMalformed, err)
		return
	}
	release, err := s.gitSlot(r.Context())
	if err != nil {
		return
	}
	defer release()
	plan, err := planFetch(s.objects, s.refs.own(install), args)
	if err != nil {
		s.refuseFetch(w, install, reasonWant, err)
		return
	}
	h := w.Header()
	h["Content-Type"] = contentTypeUploadPackResult
	h["Cache-Control"] = noCache
	if err := s.writeFetch(r.Context(), w, plan, args.ofsDelta); err != nil {
		s.log.Error("fetch failed", "install", install, "error", err)
		s.metrics.fetches.WithLabelValues(resultError).Inc()
		return
	}
	s.metrics.fetches.WithLabelValues(resultOK).Inc()
}

// refuseFetch answers a fetch its arguments or its plan refused with
// git's ERR line, and logs and counts it under code; a failure of the
// server's own is logged as one and the client told no more than that.
func (s *Server) refuseFetch(w http.ResponseWriter, install, code string, err error) {
	var fe *errFetch
	if errors.As(err, &fe) {
		s.refuse(install, "", code, "fetch: "+fe.msg)
		s.metrics.fetches.WithLabelValues(resultRefused).Inc()
		gitError(w, "upload-pack", fe.msg)
		return
	}
	if errors.Is(err, errClosureTooLarge) {
		s.refuse(install, "", reasonTooLarge, "fetch: "+err.Error())
		s.metrics.fetches.WithLabelValues(resultRefused).Inc()
		gitError(w, "upload-pack", err.Error())
		return
	}
	s.log.Error("fetch failed", "install", install, "error", err)
	s.metrics.fetches.WithLabelValues(resultError).Inc()
	gitError(w, "upload-pack", "the server could not read the install's state; try again")
}

// writeFetch writes a planned answer (gitprotocol-v2, "fetch" output):
// acknowledgments, then, when the pack is sent, shallow-info, wanted-refs
// and the packfile on side band 1.
func (s *Server) writeFetch(ctx context.Context, w http.ResponseWriter, p *fetchPlan, ofsDelta bool) error {
	var b []byte
	if p.acknowledge {
		b = pkt(b, "acknowledgments\n")
		if len(p.acks) == 0 {
			b = pkt(b, "NAK\n")
		}
		for _, h := range p.acks {
			b = pkt(b, "ACK "+h.String()+"\n")
		}
		if !p.ready {
			b = append(b, pktFlush...)
			_, err := w.Write(b)
			return err
		}
		b = pkt(b, "ready\n")
		b = append(b, pktDelim...)
	}
	if !p.pack {
		b = append(b, pktFlush...)
		_, err := w.Write(b)
		return err
	}
	if p.shallowInfo {
		b = pkt(b, "shallow-info\n")
		for _, h := range p.shallow {
			b = pkt(b, "shallow "+h.String()+"\n")
		}
		for _, h := range p.unshallow {
			b = pkt(b, "unshallow "+h.String()+"\n")
		}
		b = append(b, pktDelim...)
	}
	if len(p.wantedRefs) > 0 {
		b = pkt(b, "wanted-refs\n")
		for _, r := range p.wantedRefs {
			b = pkt(b, r.hash.String()+" "+r.name+"\n")
		}
		b = append(b, pktDelim...)
	}
	b = pkt(b, "packfile\n")
	if _, err := w.Write(b); err != nil {
		return err
	}
	err := s.packObjects(ctx, &sidebandWriter{w: w}, p.objects, ofsDelta)
	if err != nil {
		// The client reads band 3 as the remote's error.
		w.Write(sideband(nil, 3, []byte("nuon: could not pack the install's state\n")))
		return err
	}
	_, err = w.Write([]byte(pktFlush))
	return err
}

// packObjects writes a pack of exactly objs (git pack-objects, given the
// objects by id: no revision walk of its own, no thin pack).
func (s *Server) packObjects(ctx context.Context, w io.Writer, objs []packEntry, ofsDelta bool) error {
	args := []string{"pack-objects", "--stdout", "-q"}
	if ofsDelta {
		args = append(args, "--delta-base-offset")
	}
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = s.cfg.Dir
	var in bytes.Buffer
	in.Grow(len(objs) * 48)
	for _, o := range objs {
		in.WriteString(o.hash.String())
		if o.name != "" && !strings.ContainsAny(o.name, "\n") {
			in.WriteByte(' ')
			in.WriteString(o.name)
		}
		in.WriteByte('\n')
	}
	cmd.Stdin = &in
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	_, cerr := io.Copy(w, bufio.NewReaderSize(out, maxPkt-5))
	if err := cmd.Wait(); err != nil {
		return errors.Join(err, errors.New(strings.TrimSpace(stderr.String())))
	}
	return cerr
}

// sidebandWriter writes what it is given on side band 1, in pkt-lines of
// at most maxPkt bytes.
type sidebandWriter struct {
	w   io.Writer
	buf []byte
}

func (s *sidebandWriter) Write(p []byte) (int, error) {
	s.buf = sideband(s.buf[:0], 1, p)
	if _, err := s.w.Write(s.buf); err != nil {
		return 0, err
	}
	return len(p), nil
}

// ownTips are the tips of an install's refs.
func ownTips(own []ownRef) []plumbing.Hash {
	tips := make([]plumbing.Hash, 0, len(own))
	for _, o := range own {
		tips = append(tips, o.hash)
	}
	return tips
}
