package gen

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// jsiiType is the part of a .jsii type the cross-check reads.
type jsiiType struct {
	Kind       string `json:"kind"`
	Base       string `json:"base"`
	Name       string `json:"name"`
	Namespace  string `json:"namespace"`
	Properties []struct {
		Name     string `json:"name"`
		Optional bool   `json:"optional"`
	} `json:"properties"`
	Initializer struct {
		Parameters []struct {
			Name string `json:"name"`
			Type struct {
				FQN string `json:"fqn"`
			} `json:"type"`
		} `json:"parameters"`
	} `json:"initializer"`
}

// jsiiClass is what .jsii says about one resource, data source or the
// provider: its class, its Config (the type of its constructor's config
// parameter) and how many of the Config's properties are required.
type jsiiClass struct {
	base, config string
	required     int
}

// readJSII streams package/.jsii (131 MB for aws) and returns its
// top-level classes by name with their required Config property counts.
func readJSII(r io.Reader) (map[string]jsiiClass, error) {
	dec := json.NewDecoder(r)
	if _, err := dec.Token(); err != nil { // {
		return nil, err
	}
	classes := map[string]jsiiClass{}
	configs := map[string]int{} // fqn of an interface → required property count
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		if tok != "types" {
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return nil, err
			}
			continue
		}
		if _, err := dec.Token(); err != nil { // {
			return nil, err
		}
		for dec.More() {
			fqnTok, err := dec.Token()
			if err != nil {
				return nil, err
			}
			fqn, _ := fqnTok.(string)
			var t jsiiType
			if err := dec.Decode(&t); err != nil {
				return nil, err
			}
			switch {
			case t.Kind == "class" && (t.Base == "cdktf.TerraformResource" || t.Base == "cdktf.TerraformDataSource" || t.Base == "cdktf.TerraformProvider"):
				c := jsiiClass{base: strings.TrimPrefix(t.Base, "cdktf.")}
				for _, p := range t.Initializer.Parameters {
					if p.Name == "config" {
						c.config = p.Type.FQN
					}
				}
				classes[t.Namespace+"."+t.Name] = c
			case t.Kind == "interface":
				n := 0
				for _, p := range t.Properties {
					if !p.Optional {
						n++
					}
				}
				configs[fqn] = n
			}
		}
		if _, err := dec.Token(); err != nil { // }
			return nil, err
		}
	}
	for k, c := range classes {
		c.required = configs[c.config]
		classes[k] = c
	}
	return classes, nil
}

// CheckJSII cross-checks results against the package's .jsii: the same
// resource, data source and provider classes, and for each as many
// required top-level arguments (attributes and blocks with min_items) as
// its Config has required properties. It returns every difference.
func CheckJSII(path string, results map[string]Result) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	classes, err := readJSII(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	byClass := map[string]Result{}
	for _, r := range results {
		byClass[r.Class] = r
	}
	var diffs []string
	for key, c := range classes {
		name := key[strings.LastIndex(key, ".")+1:]
		r, ok := byClass[name]
		if !ok {
			diffs = append(diffs, fmt.Sprintf("class %s (%s) in .jsii has no schema", key, c.base))
			continue
		}
		if r.Kind == KindProvider {
			continue
		}
		if n := requiredArgs(r); n != c.required {
			diffs = append(diffs, fmt.Sprintf("%s: %d required arguments, .jsii's %sConfig has %d", r.Type, n, name, c.required))
		}
	}
	if len(byClass) != len(classes) {
		diffs = append(diffs, fmt.Sprintf("%d classes generated, %d in .jsii", len(byClass), len(classes)))
	}
	sort.Strings(diffs)
	return diffs, nil
}

func requiredArgs(r Result) int {
	n := 0
	for _, a := range r.Schema.Block.Attributes {
		if a.Required {
			n++
		}
	}
	for _, b := range r.Schema.Block.BlockTypes {
		if b.MinItems > 0 {
			n++
		}
	}
	return n
}
