package schemas

import (
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// checkLabels checks an install's labels as Kubernetes checks an object's:
// the schema's patterns leave out the length of a key's DNS prefix.
func checkLabels(d *document, labels map[string]string) Problems {
	var ps Problems
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			ps = append(ps, d.at("labels."+k, true, "label key %q: %s", k, strings.Join(errs, "; ")))
		}
		if errs := validation.IsValidLabelValue(labels[k]); len(errs) > 0 {
			ps = append(ps, d.at("labels."+k, false, "label value %q: %s", labels[k], strings.Join(errs, "; ")))
		}
	}
	return ps
}
