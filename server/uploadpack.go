package server

import (
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
)

// maxRequest bounds a request body the server reads before handing it to
// git: a fetch with many haves is a few hundred KB at most.
const maxRequest = 8 << 20

// v2Capabilities is the protocol v2 advertisement: what ls-refs and fetch
// (both answered here, from the ref table and the install's closure)
// support.
var v2Capabilities = func() []byte {
	var b []byte
	for _, c := range []string{"version 2", "agent=nuon-server", "ls-refs", "fetch=shallow filter", "server-option", "object-format=sha1"} {
		b = pkt(b, c+"\n")
	}
	return append(b, pktFlush...)
}()

// advertiseUpload answers the protocol v2 capability advertisement without
// running git. Protocol v0 is refused: it would advertise every ref.
func (s *Server) advertiseUpload(w http.ResponseWriter, r *http.Request, install string) {
	if !strings.Contains(r.Header.Get("Git-Protocol"), "version=2") {
		s.refuse(install, "", reasonProtocolV0, "protocol v0 fetch")
		s.metrics.polls.WithLabelValues(resultRefused).Inc()
		http.Error(w, "nuon: git protocol version 2 is required (git 2.26 or later, or -c protocol.version=2)", http.StatusForbidden)
		return
	}
	w.Header().Set("Content-Type", "application/x-git-upload-pack-advertisement")
	w.Header().Set("Cache-Control", "no-cache")
	w.Write(v2Capabilities)
}

// v2Request is a parsed protocol v2 command request. Capabilities the
// client sends are not kept: nothing here depends on them.
type v2Request struct {
	command string
	args    []string
}

// parseV2Request parses a whole protocol v2 request held in memory.
func parseV2Request(data []byte) (v2Request, error) {
	var req v2Request
	section := 0 // 0 capabilities, 1 arguments
	for {
		line, rest, err := nextPkt(data)
		data = rest
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
		line = bytes.TrimSuffix(line, []byte("\n"))
		if section == 0 {
			if c, ok := bytes.CutPrefix(line, []byte("command=")); ok {
				req.command = string(c)
			}
		} else {
			req.args = append(req.args, string(line))
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
	// One byte past the bound, so that a body of exactly maxRequest bytes
	// is read to its end (where a signed body's digest is checked) and a
	// longer one is refused rather than cut.
	data, err := io.ReadAll(io.LimitReader(rd, maxRequest+1))
	if err == nil && len(data) > maxRequest {
		err = fmt.Errorf("request longer than %d bytes", maxRequest)
	}
	return data, err
}

// uploadPack serves ls-refs from the ref table and fetch from the
// install's closure (servefetch.go).
func (s *Server) uploadPack(w http.ResponseWriter, r *http.Request, install string) {
	raw, err := body(r)
	if err != nil {
		http.Error(w, "nuon: read request: "+err.Error(), http.StatusBadRequest)
		return
	}
	req, err := parseV2Request(raw)
	if err != nil {
		s.refuse(install, "", reasonMalformed, "malformed request: "+err.Error())
		http.Error(w, "nuon: malformed protocol v2 request (protocol version 2 is required)", http.StatusBadRequest)
		return
	}
	switch req.command {
	case "ls-refs":
		s.lsRefs(w, req, install)
		s.metrics.pollsOK.Inc()
	case "fetch":
		s.fetch(w, r, req, install)
	default:
		s.refuse(install, "", reasonCommand, "command "+req.command)
		gitError(w, "upload-pack", "command "+req.command+" is not served")
	}
}

// lsRefs answers with the install's own refs that match the request's
// prefixes: a few hundred bytes whatever the size of the fleet. The answer
// is built in one buffer on the stack, without a string per line.
func (s *Server) lsRefs(w http.ResponseWriter, req v2Request, install string) {
	var prefixes []string
	for _, a := range req.args {
		if p, ok := strings.CutPrefix(a, "ref-prefix "); ok {
			prefixes = append(prefixes, p)
		}
	}
	var buf [2 * (4 + 2*hashSize + 2 + 128)]byte
	out := buf[:0]
	var own [2]ownRef
	for _, ref := range s.refs.appendOwn(own[:0], install) {
		if len(prefixes) > 0 && !hasAnyPrefix(ref.name, prefixes) {
			continue
		}
		out = appendPktLen(out, 4+2*hashSize+1+len(ref.name)+1)
		out = hex.AppendEncode(out, ref.hash[:])
		out = append(out, ' ')
		out = append(out, ref.name...)
		out = append(out, '\n')
	}
	out = append(out, pktFlush...)
	h := w.Header()
	h["Content-Type"] = contentTypeUploadPackResult
	h["Cache-Control"] = noCache
	w.Write(out)
}

// hashSize is a SHA-1 object id in bytes.
const hashSize = len(plumbing.ZeroHash)

// Header values of every poll's answer, shared rather than allocated per
// request (net/http only reads them).
var (
	contentTypeUploadPackResult = []string{"application/x-git-upload-pack-result"}
	noCache                     = []string{"no-cache"}
)

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
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
