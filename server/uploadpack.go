package server

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
)

// maxRequest bounds a request body the server reads before handing it to
// git: a fetch with many haves is a few hundred KB at most.
const maxRequest = 8 << 20

// v2Capabilities is the protocol v2 advertisement: what ls-refs (answered
// here) and fetch (git upload-pack) support.
var v2Capabilities = func() []byte {
	var b []byte
	for _, c := range []string{"version 2", "agent=nuon-server", "ls-refs", "fetch=shallow", "server-option", "object-format=sha1"} {
		b = pkt(b, c+"\n")
	}
	return append(b, pktFlush...)
}()

// advertiseUpload answers the protocol v2 capability advertisement without
// running git. Protocol v0 is refused: it would advertise every ref.
func (s *Server) advertiseUpload(w http.ResponseWriter, r *http.Request, install string) {
	if !strings.Contains(r.Header.Get("Git-Protocol"), "version=2") {
		s.refuse(install, "", "protocol v0 fetch")
		http.Error(w, "nuon: git protocol version 2 is required (git 2.26 or later, or -c protocol.version=2)", http.StatusForbidden)
		return
	}
	w.Header().Set("Content-Type", "application/x-git-upload-pack-advertisement")
	w.Header().Set("Cache-Control", "no-cache")
	w.Write(v2Capabilities)
}

// v2Request is a parsed protocol v2 command request.
type v2Request struct {
	command string
	caps    []string
	args    []string
}

func parseV2Request(r io.Reader) (v2Request, error) {
	var req v2Request
	br := bufio.NewReader(r)
	section := 0 // 0 capabilities, 1 arguments
	for {
		line, _, err := readPkt(br)
		switch {
		case errors.Is(err, errDelim):
			section = 1
			continue
		case errors.Is(err, errFlush):
			if req.command == "" {
				return req, errors.New("no command")
			}
			return req, nil
		case err != nil:
			return req, err
		}
		s := strings.TrimSuffix(string(line), "\n")
		if section == 0 {
			if c, ok := strings.CutPrefix(s, "command="); ok {
				req.command = c
			} else {
				req.caps = append(req.caps, s)
			}
		} else {
			req.args = append(req.args, s)
		}
	}
}

// body reads a request body, gunzipping it as git clients send large ones.
func body(r *http.Request) ([]byte, error) {
	var rd io.Reader = http.MaxBytesReader(nil, r.Body, maxRequest)
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(rd)
		if err != nil {
			return nil, err
		}
		rd = zr
	}
	return io.ReadAll(io.LimitReader(rd, maxRequest))
}

// uploadPack serves ls-refs from the ref table and fetch through git
// upload-pack after checking every want.
func (s *Server) uploadPack(w http.ResponseWriter, r *http.Request, install string) {
	raw, err := body(r)
	if err != nil {
		http.Error(w, "nuon: read request: "+err.Error(), http.StatusBadRequest)
		return
	}
	req, err := parseV2Request(bytes.NewReader(raw))
	if err != nil {
		s.refuse(install, "", "malformed request: "+err.Error())
		http.Error(w, "nuon: malformed protocol v2 request (protocol version 2 is required)", http.StatusBadRequest)
		return
	}
	switch req.command {
	case "ls-refs":
		s.lsRefs(w, req, install)
	case "fetch":
		s.fetch(w, r, req, raw, install)
	default:
		s.refuse(install, "", "command "+req.command)
		gitError(w, "upload-pack", "command "+req.command+" is not served")
	}
}

// lsRefs answers with the install's own refs that match the request's
// prefixes: a few hundred bytes whatever the size of the fleet.
func (s *Server) lsRefs(w http.ResponseWriter, req v2Request, install string) {
	var prefixes []string
	for _, a := range req.args {
		if p, ok := strings.CutPrefix(a, "ref-prefix "); ok {
			prefixes = append(prefixes, p)
		}
	}
	var out []byte
	for _, ref := range s.refs.own(install) {
		if len(prefixes) > 0 && !hasAnyPrefix(ref.name, prefixes) {
			continue
		}
		out = pkt(out, ref.hash.String()+" "+ref.name+"\n")
	}
	out = append(out, pktFlush...)
	w.Header().Set("Content-Type", "application/x-git-upload-pack-result")
	w.Header().Set("Cache-Control", "no-cache")
	w.Write(out)
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// fetch checks that every want is the tip of one of the install's refs
// and runs git upload-pack on the request.
func (s *Server) fetch(w http.ResponseWriter, r *http.Request, req v2Request, raw []byte, install string) {
	own := s.refs.own(install)
	for _, a := range req.args {
		switch {
		case strings.HasPrefix(a, "want "):
			h := strings.TrimPrefix(a, "want ")
			if !ownsTip(own, h) {
				s.refuse(install, "", "want "+h+" is not the tip of its refs")
				gitError(w, "upload-pack", "not our ref "+h)
				return
			}
		case strings.HasPrefix(a, "want-ref "):
			name := strings.TrimPrefix(a, "want-ref ")
			if !ownsRef(own, name) {
				s.refuse(install, "", "want-ref outside its refs")
				gitError(w, "upload-pack", "unknown ref")
				return
			}
		}
	}
	release, err := s.gitSlot(r.Context())
	if err != nil {
		return
	}
	defer release()
	cmd := exec.CommandContext(r.Context(), "git", "upload-pack", "--stateless-rpc", s.cfg.Dir)
	cmd.Env = append(os.Environ(), "GIT_PROTOCOL=version=2")
	cmd.Stdin = bytes.NewReader(raw)
	w.Header().Set("Content-Type", "application/x-git-upload-pack-result")
	w.Header().Set("Cache-Control", "no-cache")
	cmd.Stdout = w
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		s.log.Error("upload-pack failed", "install", install, "error", err, "stderr", strings.TrimSpace(stderr.String()))
	}
}

func ownsTip(own []ownRef, h string) bool {
	for _, o := range own {
		if o.hash.String() == h {
			return true
		}
	}
	return false
}

func ownsRef(own []ownRef, name string) bool {
	for _, o := range own {
		if o.name == name {
			return true
		}
	}
	return false
}

// gitError answers a request with a pkt-line ERR, which git prints as
// "fatal: remote error: MESSAGE".
func gitError(w http.ResponseWriter, service, msg string) {
	w.Header().Set("Content-Type", fmt.Sprintf("application/x-git-%s-result", service))
	w.Write(pkt(nil, "ERR nuon: "+msg+"\n"))
}

var _ = plumbing.ZeroHash
