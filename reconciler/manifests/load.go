package manifests

import (
	"nuon.dev/nuon/reconciler"

	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	yamlutil "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// ErrInvalid reports manifests that cannot be applied as written: a file
// that does not parse, an object without kind or name, an unknown input.
// Running the job again does not help.
var ErrInvalid = errors.New("invalid manifests")

// manifestExts are the file extensions read from a manifests artifact.
var manifestExts = map[string]bool{".yaml": true, ".yml": true, ".json": true}

// readDir reads every manifest file under dir, in lexical path order, and
// returns its objects, each with the file it came from.
func readDir(dir string) ([]*unstructured.Unstructured, []string, error) {
	var objs []*unstructured.Unstructured
	var files []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != dir && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			return nil
		}
		if !manifestExts[strings.ToLower(filepath.Ext(path))] || strings.HasPrefix(d.Name(), ".") {
			return nil
		}
		rel, _ := filepath.Rel(dir, path)
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		got, err := decode(rel, f)
		if err != nil {
			return err
		}
		objs = append(objs, got...)
		for range got {
			files = append(files, rel)
		}
		return nil
	})
	return objs, files, err
}

// decode reads the YAML or JSON documents of one file. Empty documents are
// skipped; a List's items are objects of their own.
func decode(name string, r io.Reader) ([]*unstructured.Unstructured, error) {
	yr := yamlutil.NewYAMLReader(bufio.NewReader(r))
	var objs []*unstructured.Unstructured
	for doc := 1; ; doc++ {
		b, err := yr.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrInvalid, name, err)
		}
		j, err := yaml.YAMLToJSON(b)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: document %d: %w", ErrInvalid, name, doc, err)
		}
		if t := bytes.TrimSpace(j); len(t) == 0 || string(t) == "null" {
			continue
		}
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(j); err != nil {
			return nil, fmt.Errorf("%w: %s: document %d: %w", ErrInvalid, name, doc, err)
		}
		if obj.IsList() {
			item := 0
			err := obj.EachListItem(func(o runtime.Object) error {
				item++
				u := o.(*unstructured.Unstructured)
				if u.IsList() {
					return fmt.Errorf("item %d is itself a list", item)
				}
				if err := named(u); err != nil {
					return fmt.Errorf("item %d (%s): %w", item, u.GetKind(), err)
				}
				objs = append(objs, u)
				return nil
			})
			if err != nil {
				return nil, fmt.Errorf("%w: %s: document %d: %w", ErrInvalid, name, doc, err)
			}
			continue
		}
		if err := named(obj); err != nil {
			return nil, fmt.Errorf("%w: %s: document %d (%s): %w", ErrInvalid, name, doc, obj.GetKind(), err)
		}
		objs = append(objs, obj)
	}
}

// named checks that an object has a name server-side apply can apply again.
func named(obj *unstructured.Unstructured) error {
	switch {
	case obj.GetName() == "" && obj.GetGenerateName() != "":
		return errors.New("metadata.generateName cannot be applied again; set metadata.name")
	case obj.GetName() == "":
		return errors.New("no metadata.name")
	}
	return nil
}

// inputRef matches ${inputs.PATH}: PATH names an input, and a key inside
// it for each further dot. $${ is an escaped, literal ${.
var inputRef = regexp.MustCompile(`\$?\$\{inputs\.([A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*)\}`)

// substitute replaces the ${inputs.…} references in every string of obj.
// A string that is exactly one reference takes the input's value with its
// type (a number, a map); a reference inside a longer string takes its
// text. Keys are not substituted.
func substitute(obj map[string]any, inputs map[string]any) error {
	s := substituter{inputs: inputs}
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		obj[k] = s.value(k, obj[k])
	}
	return errors.Join(s.errs...)
}

type substituter struct {
	inputs map[string]any
	errs   []error
}

func (s *substituter) value(path string, v any) any {
	switch v := v.(type) {
	case string:
		return s.string(path, v)
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(v)) {
			v[k] = s.value(path+"."+k, v[k])
		}
		return v
	case []any:
		for i := range v {
			v[i] = s.value(fmt.Sprintf("%s[%d]", path, i), v[i])
		}
		return v
	default:
		return v
	}
}

func (s *substituter) string(path, str string) any {
	if !strings.Contains(str, "${") {
		return str
	}
	if m := inputRef.FindStringSubmatch(str); m != nil && m[0] == str && !strings.HasPrefix(str, "$$") {
		v, err := s.lookup(m[1])
		if err != nil {
			s.errs = append(s.errs, fmt.Errorf("%s: %w", path, err))
			return str
		}
		return v
	}
	return inputRef.ReplaceAllStringFunc(str, func(ref string) string {
		if strings.HasPrefix(ref, "$$") {
			return ref[1:]
		}
		name := inputRef.FindStringSubmatch(ref)[1]
		v, err := s.lookup(name)
		if err != nil {
			s.errs = append(s.errs, fmt.Errorf("%s: %w", path, err))
			return ref
		}
		return text(v)
	})
}

// lookup finds the input at a dotted path.
func (s *substituter) lookup(path string) (any, error) {
	var cur any = s.inputs
	for i, key := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%w: input %s: %s is not a map", ErrInvalid, path, strings.Join(strings.Split(path, ".")[:i], "."))
		}
		if cur, ok = m[key]; !ok {
			return nil, fmt.Errorf("%w: unknown input %s (inputs: %s)", ErrInvalid, path, strings.Join(slices.Sorted(maps.Keys(s.inputs)), ", "))
		}
	}
	return cur, nil
}

// text is the string form of an input inside a longer string: scalars as
// they print, maps and lists as JSON.
func text(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case nil:
		return ""
	case bool:
		return strconv.FormatBool(v)
	case int64:
		return strconv.FormatInt(v, 10)
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	default:
		b, _ := json.Marshal(v)
		return string(b)
	}
}

// normalizeInputs copies inputs into the types unstructured objects hold
// (int64, float64, string, bool, nil, map[string]any, []any).
func normalizeInputs(in map[string]any) (map[string]any, error) {
	b, err := json.Marshal(in)
	if err != nil {
		return nil, err
	}
	var out map[string]any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&out); err != nil {
		return nil, err
	}
	if out == nil {
		out = map[string]any{}
	}
	return reconciler.TypedNumbers(out).(map[string]any), nil
}

// digest is the SHA-256 of obj's JSON, whose map keys are sorted: the same
// object always has the same digest.
func digest(obj *unstructured.Unstructured) (string, error) {
	b, err := json.Marshal(obj.Object)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}
