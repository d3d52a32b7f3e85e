package gitproto

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/go-git/go-git/v5/storage/memory"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"nuon.dev/nuon/internal/gittest"
)

// destination is a storer to fetch into and, for one on disk, the bare
// repository that holds it, so the git CLI can check it.
type destination struct {
	name string
	new  func(t *testing.T) (storer.Storer, string)
}

var destinations = []destination{
	{"memory", func(t *testing.T) (storer.Storer, string) { return memory.NewStorage(), "" }},
	{"disk", func(t *testing.T) (storer.Storer, string) {
		dir := filepath.Join(t.TempDir(), "agent.git")
		gittest.InitBare(t, dir)
		return filesystem.NewStorage(osfs.New(dir), cache.NewObjectLRUDefault()), dir
	}},
}

func TestFetch(t *testing.T) {
	f := newFixture(t, 10)
	c := &Client{URL: f.url}
	want := f.commits[1]
	for _, d := range destinations {
		t.Run(d.name, func(t *testing.T) {
			st, dir := d.new(t)
			f.srv.Reset()
			n, err := c.Fetch(context.Background(), st, []plumbing.Hash{want}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if n <= 0 || n >= f.srv.Bytes() {
				t.Errorf("Fetch = %d pack bytes, want between 0 and the %d response bytes", n, f.srv.Bytes())
			}
			if got := f.srv.Requests(); got != 1 {
				t.Errorf("Fetch made %d requests, want 1", got)
			}
			checkTree(t, st, want, map[string]string{
				"README.md":              "tenant\n",
				"installs/a/values.yaml": strings.Repeat("replicas: 3\n", 200),
				"installs/b/values.yaml": strings.Repeat("replicas: 2\n", 200),
			})
			checkTree(t, st, f.commits[0], map[string]string{
				"installs/a/values.yaml": strings.Repeat("replicas: 1\n", 200),
			})
			if dir != "" {
				gitCheck(t, dir, want, "installs/a/values.yaml", strings.Repeat("replicas: 3\n", 200))
			}
		})
	}
}

func TestFetchIncremental(t *testing.T) {
	f := newFixture(t, 10)
	c := &Client{URL: f.url}
	ctx := context.Background()
	old, cur := f.commits[0], f.commits[1]
	for _, d := range destinations {
		t.Run(d.name, func(t *testing.T) {
			full, _ := d.new(t)
			fullBytes, err := c.Fetch(ctx, full, []plumbing.Hash{cur}, nil)
			if err != nil {
				t.Fatal(err)
			}

			st, dir := d.new(t)
			if _, err := c.Fetch(ctx, st, []plumbing.Hash{old}, nil); err != nil {
				t.Fatal(err)
			}
			f.srv.Reset()
			n, err := c.Fetch(ctx, st, []plumbing.Hash{cur}, []plumbing.Hash{old})
			if err != nil {
				t.Fatal(err)
			}
			if n <= 0 || n >= fullBytes {
				t.Errorf("incremental fetch got %d pack bytes, want fewer than a full fetch's %d", n, fullBytes)
			}
			t.Logf("full fetch %d pack bytes, incremental %d (%d response bytes)", fullBytes, n, f.srv.Bytes())
			checkTree(t, st, cur, map[string]string{"installs/a/values.yaml": strings.Repeat("replicas: 3\n", 200)})
			if dir != "" {
				gitCheck(t, dir, cur, "installs/a/values.yaml", strings.Repeat("replicas: 3\n", 200))
			}

			f.srv.Reset()
			if n, err := c.Fetch(ctx, st, []plumbing.Hash{cur, old}, []plumbing.Hash{cur}); err != nil || n != 0 {
				t.Errorf("fetch of held commits = %d, %v; want 0, nil", n, err)
			}
			if got := f.srv.Requests(); got != 0 {
				t.Errorf("fetch of held commits made %d requests, want 0", got)
			}
		})
	}
}

// TestFetchUnheldHave checks that a have the storer lacks is not sent: the
// server would leave out objects the storer then misses.
func TestFetchUnheldHave(t *testing.T) {
	f := newFixture(t, 1)
	st := memory.NewStorage()
	if _, err := (&Client{URL: f.url}).Fetch(context.Background(), st, []plumbing.Hash{f.commits[1]}, []plumbing.Hash{f.commits[0]}); err != nil {
		t.Fatal(err)
	}
	checkTree(t, st, f.commits[0], map[string]string{"installs/b/values.yaml": strings.Repeat("replicas: 2\n", 200)})
}

func TestFetchUnknownWant(t *testing.T) {
	f := newFixture(t, 1)
	_, err := (&Client{URL: f.url}).Fetch(context.Background(), memory.NewStorage(), []plumbing.Hash{plumbing.NewHash(strings.Repeat("1", 40))}, nil)
	re, ok := errors.AsType[*RemoteError](err)
	if !ok || !strings.Contains(re.Message, "not our ref") {
		t.Fatalf("Fetch of an unknown object: %v, want a RemoteError saying not our ref", err)
	}
	if Temporary(err) {
		t.Errorf("Temporary(%v) = true", err)
	}
}

// checkTree reads commit's tree from st with go-git and compares files.
func checkTree(t *testing.T, st storer.EncodedObjectStorer, commit plumbing.Hash, files map[string]string) {
	t.Helper()
	c, err := object.GetCommit(st, commit)
	if err != nil {
		t.Fatalf("commit %s: %v", commit, err)
	}
	tree, err := c.Tree()
	if err != nil {
		t.Fatalf("tree of %s: %v", commit, err)
	}
	for name, want := range files {
		file, err := tree.File(name)
		if err != nil {
			t.Fatalf("%s:%s: %v", commit, name, err)
		}
		got, err := file.Contents()
		if err != nil {
			t.Fatalf("%s:%s: %v", commit, name, err)
		}
		if got != want {
			t.Errorf("%s:%s = %q, want %q", commit, name, truncate(got), truncate(want))
		}
	}
}

// gitCheck has the git CLI verify the bare repository dir after a fetch of
// commit: fsck finds every object complete and cat-file reads a file.
func gitCheck(t *testing.T, dir string, commit plumbing.Hash, path, want string) {
	t.Helper()
	gittest.Git(t, dir, "update-ref", "refs/heads/main", commit.String())
	gittest.Git(t, dir, "fsck", "--full", "--strict", "--no-dangling")
	if got := gittest.Git(t, dir, "cat-file", "blob", commit.String()+":"+path); got != strings.TrimSpace(want) {
		t.Errorf("git cat-file %s:%s = %q, want %q", commit, path, truncate(got), truncate(want))
	}
}

func TestReadFetch(t *testing.T) {
	oid := strings.Repeat("ab", 20)
	pack := pkt("packfile\n") + pkt("\x02Enumerating objects\n") + pkt("\x01PACK") + pkt("\x01data") + "0000"
	tests := []struct {
		name     string
		in       string
		shallow  bool // give readFetch a ShallowStorer
		want     string
		shallows []plumbing.Hash
		err      error
		remote   string
	}{
		{name: "packfile only", in: pack, want: "PACKdata"},
		{name: "acknowledgments", in: pkt("acknowledgments\n") + pkt("ACK "+oid+"\n") + pkt("ready\n") + "0001" + pack, want: "PACKdata"},
		{name: "shallow-info", shallow: true, in: pkt("shallow-info\n") + pkt("shallow "+oid+"\n") + "0001" + pack, want: "PACKdata", shallows: []plumbing.Hash{plumbing.NewHash(oid)}},
		{name: "shallow and unshallow", shallow: true, in: pkt("shallow-info\n") + pkt("shallow "+oid+"\n") + pkt("unshallow "+oid+"\n") + "0001" + pack, want: "PACKdata"},
		{name: "every section", shallow: true, in: pkt("acknowledgments\n") + pkt("ready\n") + "0001" + pkt("shallow-info\n") + "0001" + pkt("wanted-refs\n") + pkt(oid+" refs/heads/main\n") + "0001" + pkt("packfile-uris\n") + "0001" + pack, want: "PACKdata"},
		{name: "shallow without a storer", in: pkt("shallow-info\n") + pkt("shallow "+oid+"\n") + "0001" + pack, want: "PACKdata", err: ErrProtocol},
		{name: "bad shallow line", shallow: true, in: pkt("shallow-info\n") + pkt("deepen "+oid+"\n") + "0001" + pack, err: ErrProtocol},
		{name: "negotiation round", in: pkt("acknowledgments\n") + pkt("NAK\n") + "0000", err: ErrProtocol},
		{name: "unknown section", in: pkt("surprise\n") + "0001" + pack, err: ErrProtocol},
		{name: "delim first", in: "0001" + pack, err: ErrProtocol},
		{name: "ERR", in: pkt("ERR upload-pack: not our ref " + oid), remote: "upload-pack: not our ref " + oid},
		{name: "band 3", in: pkt("packfile\n") + pkt("\x01PACK") + pkt("\x03fatal: out of memory\n") + "0000", want: "PACK", remote: "fatal: out of memory"},
		{name: "truncated", in: pkt("packfile\n") + pkt("\x01PACK"), want: "PACK", err: io.ErrUnexpectedEOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var (
				st  *memory.Storage
				ss  storer.ShallowStorer
				got []byte
			)
			if tt.shallow {
				st = memory.NewStorage()
				ss = st
			}
			err := readFetch(newPktReader(strings.NewReader(tt.in)), ss, func(sb *sidebandReader) error {
				var err error
				got, err = io.ReadAll(sb)
				return err
			})
			if string(got) != tt.want {
				t.Errorf("pack = %q, want %q", got, tt.want)
			}
			switch {
			case tt.remote != "":
				if re, ok := errors.AsType[*RemoteError](err); !ok || re.Message != tt.remote {
					t.Errorf("error = %v, want RemoteError %q", err, tt.remote)
				}
			case tt.err == nil && err != nil, !errors.Is(err, tt.err):
				t.Errorf("error = %v, want %v", err, tt.err)
			}
			if st != nil {
				shallows, err := st.Shallow()
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(tt.shallows, shallows, cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("shallow commits (-want +got):\n%s", diff)
				}
			}
		})
	}
}

// TestFetchRemoteError checks that a server's band 3 message mid-pack is
// what Fetch reports, whichever way the storer takes the pack.
func TestFetchRemoteError(t *testing.T) {
	url := fakeServer(t, answer(pkt("packfile\n")+pkt("\x01PACK\x00\x00\x00\x02\x00\x00\x00\x05")+pkt("\x03upload-pack: aborting due to possible repository corruption\n")+"0000"))
	for _, d := range destinations {
		t.Run(d.name, func(t *testing.T) {
			st, dir := d.new(t)
			_, err := (&Client{URL: url}).Fetch(context.Background(), st, []plumbing.Hash{plumbing.NewHash(strings.Repeat("ab", 20))}, nil)
			re, ok := errors.AsType[*RemoteError](err)
			if !ok || !strings.Contains(re.Message, "repository corruption") {
				t.Fatalf("Fetch = %v, want the remote error", err)
			}
			checkNoPacks(t, dir)
		})
	}
}

func TestFetchBadPack(t *testing.T) {
	for name, pack := range map[string]string{
		"bad signature": "KCAP\x00\x00\x00\x02\x00\x00\x00\x05",
		"cut short":     "PACK\x00\x00\x00\x02\x00\x00\x00\x05",
	} {
		url := fakeServer(t, answer(pkt("packfile\n")+pkt("\x01"+pack)+"0000"))
		for _, d := range destinations {
			t.Run(name+"/"+d.name, func(t *testing.T) {
				st, dir := d.new(t)
				n, err := (&Client{URL: url}).Fetch(context.Background(), st, []plumbing.Hash{plumbing.NewHash(strings.Repeat("ab", 20))}, nil)
				if !errors.Is(err, ErrProtocol) {
					t.Fatalf("Fetch of a corrupt pack = %d, %v; want ErrProtocol", n, err)
				}
				checkNoPacks(t, dir)
			})
		}
	}
}

// checkNoPacks fails if a failed fetch left files in the pack directory of
// the repository dir, if there is one.
func checkNoPacks(t *testing.T, dir string) {
	t.Helper()
	if dir == "" {
		return
	}
	files, err := filepath.Glob(filepath.Join(dir, "objects", "pack", "*"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 0 {
		t.Errorf("a failed fetch left %q", files)
	}
}

// tinyPack encodes a pack of one commit with its tree and blob.
func tinyPack(tb testing.TB) []byte {
	tb.Helper()
	st := memory.NewStorage()
	blob := plumbing.ComputeHash(plumbing.BlobObject, []byte("replicas: 1\n"))
	var hashes []plumbing.Hash
	for _, o := range []struct {
		t    plumbing.ObjectType
		data string
	}{
		{plumbing.BlobObject, "replicas: 1\n"},
		{plumbing.TreeObject, "100644 values.yaml\x00" + string(blob[:])},
	} {
		obj := st.NewEncodedObject()
		obj.SetType(o.t)
		w, _ := obj.Writer()
		io.WriteString(w, o.data)
		w.Close()
		h, err := st.SetEncodedObject(obj)
		if err != nil {
			tb.Fatal(err)
		}
		hashes = append(hashes, h)
	}
	var buf bytes.Buffer
	if _, err := packfile.NewEncoder(&buf, st, false).Encode(hashes, 10); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// sidebandPack frames pack as a fetch response's packfile section.
func sidebandPack(pack []byte, chunk int) string {
	var b strings.Builder
	b.WriteString(pkt("packfile\n"))
	for len(pack) > 0 {
		n := min(chunk, len(pack))
		b.WriteString(pkt("\x01" + string(pack[:n])))
		pack = pack[n:]
	}
	b.WriteString("0000")
	return b.String()
}

func FuzzFetchResponse(f *testing.F) {
	pack := tinyPack(f)
	oid := strings.Repeat("ab", 20)
	for _, seed := range []string{
		sidebandPack(pack, 1000),
		sidebandPack(pack, 7),
		pkt("acknowledgments\n") + pkt("ready\n") + "0001" + pkt("shallow-info\n") + pkt("shallow "+oid+"\n") + "0001" + sidebandPack(pack, 1000),
		pkt("packfile\n") + pkt("\x03boom\n"),
		pkt("ERR upload-pack: not our ref " + oid),
		sidebandPack(pack[:len(pack)-3], 1000),
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		st := memory.NewStorage()
		_ = readFetch(newPktReader(bytes.NewReader(in)), st, func(sb *sidebandReader) error {
			return storePack(st, sb)
		})
	})
}

func TestFetchCanceled(t *testing.T) {
	f := newFixture(t, 1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, d := range destinations {
		t.Run(d.name, func(t *testing.T) {
			st, dir := d.new(t)
			_, err := (&Client{URL: f.url}).Fetch(ctx, st, []plumbing.Hash{f.commits[1]}, nil)
			if !errors.Is(err, context.Canceled) || Temporary(err) {
				t.Fatalf("Fetch with a canceled context = %v, want context.Canceled, not temporary", err)
			}
			checkNoPacks(t, dir)
		})
	}
}

// TestFetchDeadlineMidPack checks that a fetch cut off by its context while
// the pack streams in reports the deadline and leaves no pack behind.
func TestFetchDeadlineMidPack(t *testing.T) {
	pack := tinyPack(t)
	url := fakeServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", typeResult)
		io.WriteString(w, pkt("packfile\n")+pkt("\x01"+string(pack[:20])))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	for _, d := range destinations {
		t.Run(d.name, func(t *testing.T) {
			st, dir := d.new(t)
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			n, err := (&Client{URL: url}).Fetch(ctx, st, []plumbing.Hash{plumbing.NewHash(strings.Repeat("ab", 20))}, nil)
			if !errors.Is(err, context.DeadlineExceeded) || Temporary(err) {
				t.Fatalf("Fetch = %d, %v; want context.DeadlineExceeded", n, err)
			}
			if n != 20 {
				t.Errorf("Fetch counted %d pack bytes, want the 20 sent", n)
			}
			checkNoPacks(t, dir)
		})
	}
}
