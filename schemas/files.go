package schemas

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"runtime"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// DefaultMaxFileSize is how large a source file may be unless the loader
// is told otherwise (WithMaxFileSize): 1 MiB. The largest source files are
// release records, which grow by about 250 bytes a version: 1 MiB holds
// some 4,000 versions of one component. Parsing YAML takes about 15 times
// a file's size in memory, so the cap also bounds what one file costs.
const DefaultMaxFileSize = 1 << 20

// Option changes how Load reads the source files.
type Option func(*options)

type options struct {
	// maxFileSize is the largest source file, in bytes, that Load reads.
	// Default: DefaultMaxFileSize.
	maxFileSize int64
	// workers read install files side by side. Default: GOMAXPROCS.
	workers int
}

func makeOptions(opts []Option) options {
	o := options{maxFileSize: DefaultMaxFileSize, workers: runtime.GOMAXPROCS(0)}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// WithWorkers reads, parses and checks n install files side by side
// (GOMAXPROCS when n is 0 or less).
func WithWorkers(n int) Option {
	return func(o *options) {
		if n > 0 {
			o.workers = n
		}
	}
}

// WithMaxFileSize lets source files be up to n bytes (DefaultMaxFileSize
// when n is 0 or less). A tenant whose release records outgrow the default
// raises it here, for every command that loads its source alike.
func WithMaxFileSize(n int64) Option {
	return func(o *options) {
		if n > 0 {
			o.maxFileSize = n
		}
	}
}

// Names that a folder of source files (channels/, releases/, installs/)
// may hold besides its <name>.yaml files. They are never read.
const (
	// ReadmeFile documents a folder.
	ReadmeFile = "README.md"
	// KeepFile keeps an otherwise empty folder in git.
	KeepFile = ".gitkeep"
)

// SourceDirs are the folders of source files on main, in the order Load
// reads them.
var SourceDirs = []string{ChannelsDir, ReleasesDir, InstallsDir}

// EntryKind is what a folder entry is to the loader.
type EntryKind int

const (
	// NotRead is an entry Load does not read and does not mind: at the
	// root, anything but nuon.yaml and the source folders; in a source
	// folder, README.md and .gitkeep.
	NotRead EntryKind = iota
	// SourceFile is a source file Load reads.
	SourceFile
	// SourceFolder is one of the source folders at the root.
	SourceFolder
	// BadEntry is an entry Load reports as a problem: a name that looks
	// like a source but is not one, a folder or link where a file
	// belongs, a name no folder made by git can hold.
	BadEntry
)

// Classify says what the entry name of type mode (fs.FileMode's type
// bits) in folder dir ("." for the root) is to Load, and for a BadEntry,
// what is wrong with it, as a Problem message. Commands that read main
// other than through Load (the renderer's incremental reads) use it to
// agree with Load on which entries matter.
func Classify(dir, name string, mode fs.FileMode) (EntryKind, string) {
	if msg := checkEntryName(name); msg != "" {
		return BadEntry, msg
	}
	if dir == "." {
		return classifyRoot(name, mode)
	}
	stem, isYAML := strings.CutSuffix(name, ".yaml")
	switch {
	case isYAML && labelRE.MatchString(stem):
		if msg := notRegular(mode); msg != "" {
			return BadEntry, msg + "; a source file must be a regular file"
		}
		return SourceFile, ""
	case name == ReadmeFile || name == KeepFile:
		if msg := notRegular(mode); msg != "" {
			return BadEntry, msg + "; " + name + " must be a regular file"
		}
		return NotRead, ""
	case mode.IsDir():
		return BadEntry, fmt.Sprintf("is a folder; %s/ holds only <name>.yaml files, %s and %s", dir, ReadmeFile, KeepFile)
	}
	if to, ok := renameTo(name); ok {
		if strings.HasSuffix(name, ".yml") {
			return BadEntry, "only .yaml files are read; rename it to " + to
		}
		return BadEntry, "only lower-case .yaml files are read; rename it to " + to
	}
	if ext := extension(name); strings.EqualFold(ext, ".yaml") || strings.EqualFold(ext, ".yml") {
		return BadEntry, fmt.Sprintf("file name %q is not %s", strings.TrimSuffix(name, ext), describePattern(labelRE.String()))
	}
	return BadEntry, fmt.Sprintf("is not a source file: %s/ holds only <name>.yaml files, %s and %s", dir, ReadmeFile, KeepFile)
}

// classifyRoot is Classify at the root of main, which holds the tenant's
// other files too (modules, charts, CI): only nuon.yaml, the source
// folders and names that differ from them in case or extension matter.
func classifyRoot(name string, mode fs.FileMode) (EntryKind, string) {
	switch {
	case name == AppFile:
		if msg := notRegular(mode); msg != "" {
			return BadEntry, msg + "; " + AppFile + " must be a regular file"
		}
		return SourceFile, ""
	case isSourceDir(name):
		if !mode.IsDir() {
			return BadEntry, fmt.Sprintf("%s; %s must be a folder of <name>.yaml files", describeMode(mode), name)
		}
		return SourceFolder, ""
	case strings.EqualFold(name, AppFile) || strings.EqualFold(name, "nuon.yml"):
		return BadEntry, "is not read; the app is declared in " + AppFile + " (lower case, .yaml)"
	}
	for _, d := range SourceDirs {
		if strings.EqualFold(name, d) {
			return BadEntry, "is not read; the folder is " + d + " (lower case)"
		}
	}
	return NotRead, ""
}

func isSourceDir(name string) bool {
	for _, d := range SourceDirs {
		if name == d {
			return true
		}
	}
	return false
}

// renameTo is the source file name that name, a .yml file or a .yaml one
// in another case, was meant to be.
func renameTo(name string) (string, bool) {
	ext := extension(name)
	if !strings.EqualFold(ext, ".yaml") && !strings.EqualFold(ext, ".yml") {
		return "", false
	}
	stem := strings.TrimSuffix(name, ext)
	if !labelRE.MatchString(stem) {
		return "", false
	}
	return stem + ".yaml", true
}

func extension(name string) string {
	if i := strings.LastIndexByte(name, '.'); i > 0 {
		return name[i:]
	}
	return ""
}

// checkEntryName says what is wrong with a name a folder entry cannot
// have: git itself never writes such an entry, but a crafted tree object
// can hold one, and a name must not reach a path, a log or a terminal.
func checkEntryName(name string) string {
	switch {
	case name == "":
		return "an entry with an empty name; a git tree made by git has none"
	case name == "." || name == "..":
		return fmt.Sprintf("an entry named %q; a git tree made by git has none", name)
	case strings.Contains(name, "/"):
		return "a name with a slash in it; a git tree made by git has none"
	case strings.Contains(name, "\x00"):
		return "a name with a NUL byte in it; a git tree made by git has none"
	case !utf8.ValidString(name):
		return "a name that is not UTF-8"
	case strings.IndexFunc(name, invisible) >= 0:
		return "a name with a control or invisible character in it"
	}
	return ""
}

// notRegular describes mode when it is not a regular file's, or is "".
func notRegular(mode fs.FileMode) string {
	if mode.IsRegular() {
		return ""
	}
	return describeMode(mode)
}

func describeMode(mode fs.FileMode) string {
	switch {
	case mode.IsDir():
		return "is a folder"
	case mode&fs.ModeSymlink != 0:
		return "is a symbolic link"
	case mode&fs.ModeIrregular != 0:
		return "is a submodule or another special entry"
	case mode.IsRegular():
		return "is a file"
	}
	return "is a special file"
}

// DisplayPath is how a problem names the entry name of folder dir ("."
// for the root): as written when it is printable, else quoted as a Go
// string, so that no name can move a terminal's cursor or pass for
// another one. Names such as ".." or "a/b" are shown as they are:
// installs/../x.yaml.
func DisplayPath(dir, name string) string {
	switch {
	case name == "":
		name = `""`
	case !utf8.ValidString(name) || strings.IndexFunc(name, invisible) >= 0:
		name = strconv.Quote(name)
	}
	if dir == "." {
		return name
	}
	return dir + "/" + name
}

func invisible(r rune) bool { return !unicode.IsPrint(r) && r != ' ' }

// CheckSize returns, as Problems, that the source file file of size bytes
// is over the cap, or nil: for readers of main that do not go through
// Load, to refuse a file from its size before reading it.
func CheckSize(file string, size int64, opts ...Option) error {
	if max := makeOptions(opts).maxFileSize; size > max {
		return Problems{{File: file, Message: tooLarge(size, max)}}
	}
	return nil
}

// readFile reads one source file, refusing it before reading when it is
// larger than max bytes.
func readFile(fsys fs.FS, file string, max int64) ([]byte, string) {
	f, err := fsys.Open(file)
	if err != nil {
		return nil, "cannot read: " + errText(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, "cannot read: " + errText(err)
	}
	if !fi.Mode().IsRegular() {
		return nil, describeMode(fi.Mode()) + "; a source file must be a regular file"
	}
	if fi.Size() > max {
		return nil, tooLarge(fi.Size(), max)
	}
	// A file that grows between Stat and Read is read no further than
	// the cap.
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, "cannot read: " + errText(err)
	}
	if int64(len(data)) > max {
		return nil, tooLarge(int64(len(data)), max)
	}
	return data, ""
}

// errText is err's message without the operation and path of an
// fs.PathError: the problem names the file already.
func errText(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

func tooLarge(size, max int64) string {
	return fmt.Sprintf("is %s, more than the %s a source file may be", bytesText(size), bytesText(max))
}

// bytesText writes n bytes for a person: 1 MiB, 50.0 MiB, 512 bytes.
func bytesText(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB (%d bytes)", float64(n)/(1<<20), n)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
