package sandboxes

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// Names of the sandboxes this package holds.
const (
	Local  = "local"
	AWSEKS = "aws-eks"
)

//go:embed local/*.tf local/*.sh aws-eks/*.tf
var modules embed.FS

// Extract writes sandbox name's module into dir (made if missing), so that
// a binary carries its sandboxes: `nuon install create` applies them from
// there. Scripts are made executable. Files already there are replaced, so
// dir always holds this binary's version of the module; other files (the
// .terraform folder of an earlier init) are left alone.
func Extract(name, dir string) error {
	files, err := fs.ReadDir(modules, name)
	if err != nil {
		return fmt.Errorf("sandbox %s: unknown", name)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("sandbox %s: %w", name, err)
	}
	for _, f := range files {
		b, err := modules.ReadFile(path.Join(name, f.Name()))
		if err != nil {
			return fmt.Errorf("sandbox %s: %w", name, err)
		}
		mode := os.FileMode(0o644)
		if strings.HasSuffix(f.Name(), ".sh") {
			mode = 0o755
		}
		dst := filepath.Join(dir, f.Name())
		if err := os.WriteFile(dst, b, mode); err != nil {
			return fmt.Errorf("sandbox %s: %w", name, err)
		}
		if err := os.Chmod(dst, mode); err != nil {
			return fmt.Errorf("sandbox %s: %w", name, err)
		}
	}
	return nil
}
