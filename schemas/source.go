package schemas

import (
	"context"
	"encoding/base64"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/crypto/ssh"
)

// Paths of the source files on main.
const (
	AppFile     = "nuon.yaml"
	ChannelsDir = "channels"
	ReleasesDir = "releases"
	InstallsDir = "installs"
)

// Source is every source file on main, loaded and validated.
type Source struct {
	App      App
	Channels map[string]Channel
	Releases map[string]Release
	Installs map[string]Install

	docs map[string]*document
	// broken holds the files that exist but did not load, so that the
	// cross-file checks do not report them a second time as missing.
	broken map[string]bool
	opts   options

	// fsys is what the source was loaded from; installFiles the install
	// files Open listed there, sorted, and check what each is checked
	// against (EachInstall).
	fsys         fs.FS
	installFiles []string
	check        *checker
}

// Load reads the source files from fsys (the root of a main checkout or
// commit), validates each against its JSON Schema and then checks that they
// agree with one another. It returns every problem found, as Problems,
// together with the source as far as it loaded, so that a caller can go on
// with the installs whose own files are sound (see Problems.Split).
//
// Every entry of the source folders is accounted for (see Classify): a
// name that looks like a source but is not one, a folder, link or
// submodule where a file belongs, and a name no git tree made by git
// holds are each a problem naming the entry, never skipped. A file larger
// than the cap (DefaultMaxFileSize, WithMaxFileSize) is refused from its
// size, before it is read.
//
// Load is Open and then EachInstall, filing every install that parsed in
// Installs, those wrong against the rest of the source included.
func Load(fsys fs.FS, opts ...Option) (*Source, error) {
	s, ps := open(fsys, opts)
	var mu sync.Mutex
	ps = append(ps, s.eachInstall(context.Background(), func(id string, in Install, _ Problems) {
		mu.Lock()
		s.Installs[id] = in
		mu.Unlock()
	})...)
	return s, ps.Err()
}

// Open is Load without the install files: it loads and checks nuon.yaml,
// the channels and the releases, and lists installs/, and leaves the
// install files to EachInstall; Installs stays empty. It returns the
// problems found so far, as Load does.
//
// A render uses it to render each install as soon as its file is loaded,
// rather than holding every loaded install at once: at 100,000 installs
// they were some 95 MB of the live heap, marked at every collection
// (renderer's BenchmarkRenderFleet).
func Open(fsys fs.FS, opts ...Option) (*Source, error) {
	s, ps := open(fsys, opts)
	return s, ps.Err()
}

// open is Open, returning its problems as they are.
func open(fsys fs.FS, opts []Option) (*Source, Problems) {
	s := &Source{
		Channels: map[string]Channel{},
		Releases: map[string]Release{},
		Installs: map[string]Install{},
		docs:     map[string]*document{},
		broken:   map[string]bool{},
		opts:     makeOptions(opts),
		fsys:     fsys,
	}
	root, ps := s.listDir(fsys, ".")
	if root[AppFile] {
		ps = append(ps, s.loadFile(fsys, AppFile, SchemaApp, &s.App)...)
	} else if !s.broken[AppFile] {
		ps = missingApp(ps)
	}
	// Installs come last, each checked against the rest (eachInstall).
	for _, dir := range SourceDirs {
		if dir == InstallsDir {
			s.check = s.checkShared()
			ps = append(ps, s.check.ps...)
		}
		if !root[dir] {
			continue // none yet, or reported
		}
		files, dps := s.listDir(fsys, dir)
		ps = append(ps, dps...)
		sorted := slices.Sorted(maps.Keys(files))
		if dir == InstallsDir {
			s.installFiles = sorted
			continue
		}
		for _, file := range sorted {
			name := strings.TrimSuffix(path.Base(file), ".yaml")
			switch dir {
			case ChannelsDir:
				ps = append(ps, loadInto(s, fsys, file, SchemaChannel, s.Channels, name)...)
			case ReleasesDir:
				ps = append(ps, loadInto(s, fsys, file, SchemaRelease, s.Releases, name)...)
			}
		}
	}
	return s, ps
}

// listDir lists the folder dir ("." for the root) and returns the paths
// of the entries to read: source files, and at the root the source
// folders too. Every other entry that matters is a problem.
func (s *Source) listDir(fsys fs.FS, dir string) (map[string]bool, Problems) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		if dir == "." {
			s.broken[AppFile] = true
			return nil, Problems{{File: AppFile, Message: "cannot list the files of main: " + errText(err)}}
		}
		return nil, Problems{{File: dir, Message: "cannot list: " + errText(err)}}
	}
	count := map[string]int{}
	for _, e := range entries {
		count[e.Name()]++
	}
	read := map[string]bool{}
	var ps Problems
	for _, e := range entries {
		name := e.Name()
		file := DisplayPath(dir, name)
		kind, msg := Classify(dir, name, e.Type())
		switch n := count[name]; {
		case n < 0:
			continue // reported
		case n > 1 && (dir != "." || kind != NotRead):
			ps = append(ps, Problem{File: file, Message: fmt.Sprintf("appears %d times in its folder; a git tree made by git holds a name once", n)})
			count[name] = -1
			s.broken[path.Join(dir, name)] = true
			continue
		}
		switch kind {
		case SourceFile, SourceFolder:
			read[path.Join(dir, name)] = true
		case BadEntry:
			ps = append(ps, Problem{File: file, Message: msg})
			if checkEntryName(name) == "" {
				s.broken[path.Join(dir, name)] = true
			}
			if to, ok := renameTo(name); ok && dir != "." && checkEntryName(name) == "" {
				// Do not report it a second time as missing.
				s.broken[path.Join(dir, to)] = true
			}
		}
	}
	return read, ps
}

// missingApp is the problem of a main without nuon.yaml, in place of the
// problems of the root entries (ps) that were meant to be it.
func missingApp(ps Problems) Problems {
	msg := "missing: the app and its components are declared in " + AppFile + " at the root"
	out := ps[:0]
	for _, p := range ps {
		if strings.EqualFold(p.File, AppFile) || strings.EqualFold(p.File, "nuon.yml") {
			msg = "missing; rename " + p.File + " to " + AppFile
			continue
		}
		out = append(out, p)
	}
	return append(out, Problem{File: AppFile, Message: msg})
}

// loadInto loads one file of a folder and, when it is valid, files it
// under name.
func loadInto[T any](s *Source, fsys fs.FS, file, schema string, into map[string]T, name string) Problems {
	var v T
	if ps := s.loadFile(fsys, file, schema, &v); len(ps) > 0 {
		return ps
	}
	into[name] = v
	return nil
}

func (s *Source) loadFile(fsys fs.FS, file, schema string, out any) Problems {
	d, ps := s.parseFile(fsys, file, schema, out)
	if len(ps) > 0 {
		s.broken[file] = true
		return ps
	}
	s.docs[file] = d
	return nil
}

// parseFile reads, parses and validates one file into out, changing
// nothing of s: eachInstall parses files side by side.
func (s *Source) parseFile(fsys fs.FS, file, schema string, out any) (*document, Problems) {
	data, msg := readFile(fsys, file, s.opts.maxFileSize)
	if msg != "" {
		return nil, Problems{{File: file, Message: msg}}
	}
	d, ps := parseYAML(file, data)
	if len(ps) == 0 {
		ps = d.validate(schema, out)
	}
	return d, ps
}

// ListedInstalls returns the ids of the install files Open listed, sorted:
// those EachInstall reads.
func (s *Source) ListedInstalls() []string {
	ids := make([]string, len(s.installFiles))
	for i, file := range s.installFiles {
		ids[i] = installName(file)
	}
	slices.Sort(ids)
	return ids
}

// EachInstall reads, parses and checks against the rest of the source each
// install file Open listed, and hands each install whose file has no
// problem to fn. The others' files are marked broken and their problems
// returned, as Load returns them. fn is called from a worker per CPU
// (WithWorkers), so it must be safe for concurrent use; Installs is left
// as it is.
//
// Once ctx is done, no more files are read and it returns ctx's error.
func (s *Source) EachInstall(ctx context.Context, fn func(id string, in Install)) error {
	ps := s.eachInstall(ctx, func(id string, in Install, ps Problems) {
		if len(ps) == 0 {
			fn(id, in)
		}
	})
	if err := ctx.Err(); err != nil {
		return err
	}
	return ps.Err()
}

// eachInstall reads, parses and checks each install file listed and calls
// fn with each install that parsed and the problems the checks against
// the rest of the source found (none or some); the files that did not
// parse are then marked broken. It returns every problem in file order, as
// one worker reading the files in turn reports them.
//
// Files are read, parsed and checked by a worker per CPU (WithWorkers):
// on one CPU the 100,000 files of a fleet took a render of it some 20 s
// with the other CPU idle. An install's parsed document, needed only for the positions of
// its problems, is let go once it is checked: kept until the end, the
// documents of 100,000 installs held 740 MB (renderer's
// BenchmarkRenderFleet).
func (s *Source) eachInstall(ctx context.Context, fn func(id string, in Install, ps Problems)) Problems {
	files := s.installFiles
	type outcome struct {
		ps     Problems
		broken bool
	}
	out := make([]outcome, len(files))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(s.opts.workers, len(files)) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(files) && ctx.Err() == nil; i = int(next.Add(1) - 1) {
				var in Install
				d, ps := s.parseFile(s.fsys, files[i], SchemaInstall, &in)
				if len(ps) > 0 {
					out[i] = outcome{ps: ps, broken: true}
					continue
				}
				ps = s.check.install(installName(files[i]), d, in)
				out[i].ps = ps
				fn(installName(files[i]), in, ps)
			}
		})
	}
	wg.Wait()
	var ps Problems
	for i, o := range out {
		if o.broken {
			s.broken[files[i]] = true
		}
		ps = append(ps, o.ps...)
	}
	return ps
}

// installName is the install an installs/ file is of.
func installName(file string) string { return strings.TrimSuffix(path.Base(file), ".yaml") }

// Component returns the app's component by name.
func (s *Source) Component(name string) (Component, bool) {
	for _, c := range s.App.Components {
		if c.Name == name {
			return c, true
		}
	}
	return Component{}, false
}

// SandboxVersion is the sandbox version install in runs: its own
// sandbox.version, else its channel's pin. ok is false when the app
// declares no sandbox or nothing pins one.
func (s *Source) SandboxVersion(in Install) (version string, ok bool) {
	if s.App.Sandbox == nil {
		return "", false
	}
	if in.Sandbox.Version != "" {
		return in.Sandbox.Version, true
	}
	version, ok = s.Channels[in.Channel].Components[SandboxComponent]
	return version, ok
}

// ReleaseOf returns the release record of one component version.
func (s *Source) ReleaseOf(component, version string) (ReleaseVersion, bool) {
	for _, v := range s.Releases[component].Versions {
		if v.Version == version {
			return v, true
		}
	}
	return ReleaseVersion{}, false
}

// InstallIDs returns the install ids, sorted.
func (s *Source) InstallIDs() []string {
	ids := make([]string, 0, len(s.Installs))
	for id := range s.Installs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// checkShared finds what the schemas cannot in nuon.yaml, the channels and
// the releases: files that disagree with one another. It returns the
// checker, with those problems, that then checks each install
// (checker.install). When nuon.yaml did not load, only the checks that do
// not need it run.
func (s *Source) checkShared() *checker {
	c := &checker{Source: s}
	if _, c.appOK = s.docs[AppFile]; c.appOK {
		c.index = map[string]int{}
	}
	for _, step := range []func() Problems{c.components, c.releases, c.channels} {
		c.ps = append(c.ps, step()...)
	}
	return c
}

// checker holds what the steps of check share.
type checker struct {
	*Source
	appOK bool
	// index maps component name to its place in nuon.yaml; nil when
	// nuon.yaml did not load.
	index map[string]int
	ps    Problems
}

// components checks nuon.yaml on its own: unique names, dependencies and
// the references in inputs.
func (c *checker) components() Problems {
	if !c.appOK {
		return nil
	}
	var ps Problems
	app := c.docs[AppFile]
	for i, comp := range c.App.Components {
		if comp.Name == SandboxComponent && c.App.Sandbox != nil {
			ps = append(ps, app.at(fmt.Sprintf("components[%d].name", i), false, "%q is the sandbox's name (nuon.yaml declares a sandbox); name the component otherwise", comp.Name))
		}
		if j, dup := c.index[comp.Name]; dup {
			first := app.at(fmt.Sprintf("components[%d].name", j), false, "")
			ps = append(ps, app.at(fmt.Sprintf("components[%d].name", i), false, "component %q is declared twice (first at line %d)", comp.Name, first.Line))
			continue
		}
		c.index[comp.Name] = i
	}
	for i, comp := range c.App.Components {
		for j, dep := range comp.DependsOn {
			f := fmt.Sprintf("components[%d].dependsOn[%d]", i, j)
			switch _, ok := c.index[dep]; {
			case dep == comp.Name:
				ps = append(ps, app.at(f, false, "component %q depends on itself", comp.Name))
			case !ok:
				ps = append(ps, app.at(f, false, "%q is not a component%s", dep, knownNames(c.App.Components)))
			}
		}
	}
	if cycle := c.cycle(c.index); cycle != nil {
		i := c.index[cycle[0]]
		return append(ps, app.at(fmt.Sprintf("components[%d].dependsOn", i), false, "dependency cycle: %s", strings.Join(cycle, " → ")))
	}
	return append(append(ps, c.checkInputs(c.index)...), c.checkSandboxInputs()...)
}

// known tells whether name is a component of nuon.yaml, or the sandbox
// when it declares one: what channels pin and releases/ holds.
func (c *checker) known(name string) bool {
	_, ok := c.index[name]
	return ok || (name == SandboxComponent && c.App.Sandbox != nil)
}

// checkSandboxInputs checks nuon.yaml's sandbox inputs: the sandbox runs
// before every component and reads nothing of the install but its id and
// inputs.
func (c *checker) checkSandboxInputs() Problems {
	if c.App.Sandbox == nil {
		return nil
	}
	var ps Problems
	app := c.docs[AppFile]
	_, _ = WalkStrings(map[string]any(c.App.Sandbox.Inputs), "sandbox.inputs", func(field, str string) (any, error) {
		refs, err := ParseRefs(str)
		if err != nil {
			ps = append(ps, app.at(field, false, "%v", err))
			return str, nil
		}
		for _, r := range refs {
			if r.Kind != RefInstallID && r.Kind != RefInstallInput {
				ps = append(ps, app.at(field, false, "${%s}: the sandbox's inputs may reference only ${install.id} and ${install.inputs.NAME}: it is applied before anything else", r))
			}
		}
		return str, nil
	})
	return ps
}

// releases checks that each release file is its component's and lists a
// version once.
func (c *checker) releases() Problems {
	var ps Problems
	for name, r := range c.Releases {
		d := c.docs[path.Join(ReleasesDir, name+".yaml")]
		if r.Component != name {
			ps = append(ps, d.at("component", false, "is %q, but this file holds the releases of %q (its name)", r.Component, name))
		} else if c.appOK && !c.known(name) {
			ps = append(ps, d.at("component", false, "component %q is not in %s", name, AppFile))
		}
		seen := map[string]int{}
		for i, v := range r.Versions {
			if j, dup := seen[v.Version]; dup {
				first := d.at(fmt.Sprintf("versions[%d].version", j), false, "")
				ps = append(ps, d.at(fmt.Sprintf("versions[%d].version", i), false, "version %q is released twice (first at line %d)", v.Version, first.Line))
				continue
			}
			seen[v.Version] = i
		}
	}
	return ps
}

// channels checks that every channel pins every component to a released
// version.
func (c *checker) channels() Problems {
	if !c.appOK {
		return nil
	}
	var ps Problems
	for name, ch := range c.Channels {
		d := c.docs[path.Join(ChannelsDir, name+".yaml")]
		for comp, version := range ch.Components {
			ps = append(ps, c.checkPin(d, "components."+comp, comp, version)...)
		}
		for _, comp := range c.App.Components {
			if _, ok := ch.Components[comp.Name]; !ok {
				ps = append(ps, d.at("components", true, "no version pin for component %q", comp.Name))
			}
		}
		if _, ok := ch.Components[SandboxComponent]; c.App.Sandbox != nil && !ok {
			ps = append(ps, d.at("components", true, "no version pin for the sandbox (%s: VERSION): nuon.yaml declares one", SandboxComponent))
		}
	}
	return ps
}

// install checks one install's id, channel, version overrides, agent key
// and inputs against the rest of the source; d is its file's document
// and in what it loaded.
func (c *checker) install(id string, d *document, in Install) Problems {
	var ps Problems
	if in.ID != "" && in.ID != id {
		ps = append(ps, d.at("id", false, "is %q, but the file name makes this install %q", in.ID, id))
	}
	if _, ok := c.Channels[in.Channel]; !ok && !c.broken[path.Join(ChannelsDir, in.Channel+".yaml")] {
		ps = append(ps, d.at("channel", false, "channel %q does not exist (no %s/%s.yaml)", in.Channel, ChannelsDir, in.Channel))
	}
	if msg := checkAgentKey(in.AgentKey); msg != "" {
		ps = append(ps, d.at("agentKey", false, "%s", msg))
	}
	ps = append(ps, checkLabels(d, in.Labels)...)
	if !c.appOK {
		return ps
	}
	for comp, version := range in.Versions {
		if comp == SandboxComponent && c.App.Sandbox != nil {
			ps = append(ps, d.at("versions."+comp, true, "the sandbox's version is overridden by sandbox.version, not versions"))
			continue
		}
		ps = append(ps, c.checkPin(d, "versions."+comp, comp, version)...)
	}
	ps = append(ps, c.checkInstallSandbox(d, in)...)
	for i, comp := range c.App.Components {
		ps = append(ps, c.checkInstallInputs(d, in, i, comp)...)
	}
	return ps
}

// checkInstallSandbox checks an install's sandbox and registry against
// nuon.yaml: without a declared sandbox the install names its registry;
// with one, its sandbox's version is released and the release has an
// artifact for the install's sandbox name.
func (c *checker) checkInstallSandbox(d *document, in Install) Problems {
	if c.App.Sandbox == nil {
		var ps Problems
		if in.Registry == "" {
			ps = append(ps, d.at("registry", true, "is required: %s declares no sandbox whose registry output could stand for it", AppFile))
		}
		return ps
	}
	version, ok := c.SandboxVersion(in)
	if !ok {
		return nil // the channel's own problem, or the channel's missing
	}
	if in.Sandbox.Version != "" {
		if ps := c.checkPin(d, "sandbox.version", SandboxComponent, version); ps != nil {
			return ps
		}
	}
	rel, ok := c.ReleaseOf(SandboxComponent, version)
	if !ok {
		return nil // reported on the channel
	}
	if _, ok := rel.Artifacts[in.Sandbox.Name]; !ok {
		names := slices.Sorted(maps.Keys(rel.Artifacts))
		return Problems{d.at("sandbox.name", false, "sandbox %s has no artifact %q (%s/%s.yaml has: %s)", version, in.Sandbox.Name, ReleasesDir, SandboxComponent, strings.Join(names, ", "))}
	}
	return nil
}

// checkPin checks that a channel pin or install override names a released
// version of a component.
func (c *checker) checkPin(d *document, field, comp, version string) Problems {
	if !c.known(comp) {
		return Problems{d.at(field, true, "component %q is not in %s", comp, AppFile)}
	}
	file := path.Join(ReleasesDir, comp+".yaml")
	switch _, ok := c.Releases[comp]; {
	case c.broken[file]:
		return nil
	case !ok:
		return Problems{d.at(field, false, "%s %s is not released: there is no %s", comp, version, file)}
	}
	if _, ok := c.ReleaseOf(comp, version); !ok {
		return Problems{d.at(field, false, "%s %s is not released: %s has no version %q", comp, version, file, version)}
	}
	return nil
}

// checkAgentKey says what is wrong with an install's agent key, or "". The
// schema has checked its form already: ssh-ed25519, base64 data, a comment.
func checkAgentKey(key string) string {
	fields := strings.Fields(key)
	if len(fields) < 2 {
		return "not an OpenSSH public key"
	}
	blob, err := base64.StdEncoding.DecodeString(fields[1])
	if err != nil {
		return "the key data after " + fields[0] + " is not valid base64"
	}
	pk, err := ssh.ParsePublicKey(blob)
	if err != nil {
		return "the key data is not an SSH public key"
	}
	if pk.Type() != ssh.KeyAlgoED25519 || fields[0] != ssh.KeyAlgoED25519 {
		return fmt.Sprintf("the key data is of type %s, not %s", pk.Type(), ssh.KeyAlgoED25519)
	}
	return ""
}

// knownNames lists the component names for a message about a name that
// is not one of them.
func knownNames(cs []Component) string {
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = c.Name
	}
	slices.Sort(names)
	return " (components: " + strings.Join(names, ", ") + ")"
}

// cycle returns one dependency cycle, first node repeated last, or nil.
func (s *Source) cycle(index map[string]int) []string {
	const (
		unseen = iota
		active
		done
	)
	state := map[string]int{}
	var stack []string
	var visit func(n string) []string
	visit = func(n string) []string {
		state[n] = active
		stack = append(stack, n)
		i, ok := index[n]
		if ok {
			for _, d := range s.App.Components[i].DependsOn {
				if _, ok := index[d]; !ok || d == n {
					continue
				}
				switch state[d] {
				case active:
					at := slices.Index(stack, d)
					return append(append([]string(nil), stack[at:]...), d)
				case unseen:
					if c := visit(d); c != nil {
						return c
					}
				}
			}
		}
		stack = stack[:len(stack)-1]
		state[n] = done
		return nil
	}
	for _, c := range s.App.Components {
		if state[c.Name] == unseen {
			if cyc := visit(c.Name); cyc != nil {
				return cyc
			}
		}
	}
	return nil
}

// Dependencies returns every component name reachable through dependsOn
// from name (not including name).
func (s *Source) Dependencies(name string) map[string]bool {
	out := map[string]bool{}
	var walk func(n string)
	walk = func(n string) {
		c, ok := s.Component(n)
		if !ok {
			return
		}
		for _, d := range c.DependsOn {
			if !out[d] {
				out[d] = true
				walk(d)
			}
		}
	}
	walk(name)
	return out
}

func (s *Source) checkInputs(index map[string]int) Problems {
	var ps Problems
	app := s.docs[AppFile]
	for i, c := range s.App.Components {
		deps := s.Dependencies(c.Name)
		_, err := WalkStrings(map[string]any(c.Inputs), fmt.Sprintf("components[%d].inputs", i), func(field, str string) (any, error) {
			refs, err := ParseRefs(str)
			if err != nil {
				ps = append(ps, app.at(field, false, "%v", err))
				return str, nil
			}
			for _, r := range refs {
				if r.Kind == RefSandbox {
					if msg := checkSandboxRef(s.App.Sandbox, r); msg != "" {
						ps = append(ps, app.at(field, false, "${%s}: %s", r, msg))
					}
					continue
				}
				if r.Kind != RefOutput {
					continue
				}
				j, ok := index[r.Name]
				switch {
				case !ok:
					ps = append(ps, app.at(field, false, "${%s}: %q is not a component%s", r, r.Name, knownNames(s.App.Components)))
				case !deps[r.Name]:
					ps = append(ps, app.at(field, false, "${%s}: component %q must depend on %q (add it to dependsOn) to use its outputs", r, c.Name, r.Name))
				case !slices.Contains(s.App.Components[j].Outputs, r.Output):
					ps = append(ps, app.at(field, false, "${%s}: component %q declares no output %q%s", r, r.Name, r.Output, outputList(s.App.Components[j].Outputs)))
				}
			}
			return str, nil
		})
		if err != nil {
			ps = append(ps, app.at(fmt.Sprintf("components[%d].inputs", i), false, "%v", err))
		}
	}
	return ps
}

// checkInstallInputs reports install inputs a component needs but the
// install does not provide.
func (s *Source) checkInstallInputs(d *document, in Install, i int, c Component) Problems {
	var ps Problems
	_, _ = WalkStrings(map[string]any(c.Inputs), "", func(field, str string) (any, error) {
		refs, _ := ParseRefs(str)
		for _, r := range refs {
			if r.Kind != RefInstallInput {
				continue
			}
			if _, ok := in.Inputs[r.Name]; !ok {
				use := s.docs[AppFile].at(joinField(fmt.Sprintf("components[%d].inputs", i), field), false, "")
				ps = append(ps, d.at("inputs", true, "no input %q, which component %q uses (%s:%d)", r.Name, c.Name, AppFile, use.Line))
			}
		}
		return str, nil
	})
	return ps
}

// checkSandboxRef says what is wrong with a sandbox output reference, or
// "": the app must declare a sandbox, and the output and key must be in
// the contract (SandboxOutputs).
func checkSandboxRef(sb *AppSandbox, r Ref) string {
	if sb == nil {
		return AppFile + " declares no sandbox (sandbox:), so there are no sandbox outputs"
	}
	keys, ok := SandboxOutputs[r.Name]
	if !ok {
		return fmt.Sprintf("the sandbox has no output %q (its outputs: %s)", r.Name, strings.Join(slices.Sorted(maps.Keys(SandboxOutputs)), ", "))
	}
	if r.Output != "" && !slices.Contains(keys, r.Output) {
		return fmt.Sprintf("the sandbox's output %s has no key %q (its keys: %s)", r.Name, r.Output, strings.Join(keys, ", "))
	}
	return ""
}

func outputList(outputs []string) string {
	if len(outputs) == 0 {
		return " (it declares none)"
	}
	return " (its outputs: " + strings.Join(outputs, ", ") + ")"
}
