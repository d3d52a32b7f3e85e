package manifests

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"nuon.dev/nuon/internal/atomicfile"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/fluxcd/cli-utils/pkg/object"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"nuon.dev/nuon/reconciler/kube"
)

// InventoryFile is the inventory's file in the component's state directory.
const InventoryFile = "inventory.json"

// kindInventory is the kind of an inventory file.
const kindInventory = "ManifestInventory"

// Inventory is what the plugin applied for one component: every object,
// with the digest of what was sent and the resourceVersion the object had
// right after. A later job prunes what the inventory holds and the new
// manifests do not, and skips the objects whose digest and
// resourceVersion did not move.
type Inventory struct {
	APIVersion string  `json:"apiVersion"`
	Kind       string  `json:"kind"`
	Component  string  `json:"component"`
	Objects    []Entry `json:"objects"`
}

// Entry is one object of an inventory.
type Entry struct {
	Group     string `json:"group,omitempty"`
	Version   string `json:"version"`
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	// Digest is the SHA-256 of the object as the plugin applied it.
	Digest string `json:"digest"`
	// ResourceVersion is the object's resourceVersion after the apply; if
	// it moved, someone (a controller, a person) wrote the object since.
	ResourceVersion string `json:"resourceVersion,omitempty"`
}

// ID is the entry's object identity.
func (e Entry) ID() object.ObjMetadata {
	return object.ObjMetadata{Namespace: e.Namespace, Name: e.Name, GroupKind: schema.GroupKind{Group: e.Group, Kind: e.Kind}}
}

// GVK is the entry's group, version and kind.
func (e Entry) GVK() schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: e.Group, Version: e.Version, Kind: e.Kind}
}

// String is Kind/namespace/name, or Kind/name for a cluster-scoped object.
func (e Entry) String() string { return fmtID(e.ID()) }

// Object is a stub of the entry's object, enough to delete it.
func (e Entry) Object() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(e.GVK())
	u.SetNamespace(e.Namespace)
	u.SetName(e.Name)
	return u
}

// fmtID is Kind/namespace/name, or Kind/name for a cluster-scoped object,
// with the group after the kind when there is one (Kind.group/…).
func fmtID(id object.ObjMetadata) string {
	var b strings.Builder
	b.WriteString(kube.KindName(id.GroupKind))
	b.WriteByte('/')
	if id.Namespace != "" {
		b.WriteString(id.Namespace + "/")
	}
	b.WriteString(id.Name)
	return b.String()
}

// entryOf returns obj's inventory entry, without a resourceVersion.
func entryOf(obj *unstructured.Unstructured, digest string) Entry {
	gvk := obj.GroupVersionKind()
	return Entry{
		Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind,
		Namespace: obj.GetNamespace(), Name: obj.GetName(), Digest: digest,
	}
}

// readInventory reads the inventory in dir; with none it returns an
// empty one and false.
func readInventory(dir string) (*Inventory, bool, error) {
	b, err := os.ReadFile(filepath.Join(dir, InventoryFile))
	if errors.Is(err, fs.ErrNotExist) {
		return &Inventory{}, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	var inv Inventory
	if err := json.Unmarshal(b, &inv); err != nil {
		return nil, false, fmt.Errorf("inventory %s: %w", filepath.Join(dir, InventoryFile), err)
	}
	if inv.Kind != kindInventory {
		return nil, false, fmt.Errorf("inventory %s: kind is %q, not %q", filepath.Join(dir, InventoryFile), inv.Kind, kindInventory)
	}
	return &inv, true, nil
}

// write writes the inventory to dir atomically, its objects in a stable
// order.
func (inv *Inventory) write(dir string) error {
	slices.SortFunc(inv.Objects, func(a, b Entry) int { return strings.Compare(a.ID().String(), b.ID().String()) })
	return atomicfile.WriteJSON(filepath.Join(dir, InventoryFile), inv)
}

// names returns the entries' ids, sorted: the "inventory" output.
func (inv *Inventory) names() []any {
	ids := make([]string, len(inv.Objects))
	for i, e := range inv.Objects {
		ids[i] = e.String()
	}
	slices.Sort(ids)
	out := make([]any, len(ids))
	for i, s := range ids {
		out[i] = s
	}
	return out
}
