package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/spf13/cobra"
	"golang.org/x/crypto/ssh"
	"gopkg.in/yaml.v3"

	"nuon.dev/nuon/agent"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/schemas"
)

type statusOptions struct {
	repo, install, output, cacheDir, source string
}

func NewStatusCmd(g *Globals) *cobra.Command {
	o := &statusOptions{}
	cmd := &cobra.Command{
		Use:   "status --repo REPO [--install ID]",
		Short: "Show what every install's agent reported",
		Long: `Status reads every refs/heads/nuon/status/<id> (or one, with --install) and
shows each install's desired and applied commits, generation, phase and failing
components. Each status commit's signature is checked against the agentKey of
installs/<id>.yaml on main: VERIFIED says whether the install's own agent wrote it.
ARTIFACTS is what the agent says of its artifacts: verified (each signature
checked against the vendor key before deploying), or UNVERIFIED when it runs
with --insecure-skip-artifact-verification.
Status history ('git log refs/heads/nuon/status/<id>') is the install's audit log.`,
		Example: `  nuon status --repo ./tenant.git
  nuon status --repo https://git.example.com/vendor/tenant.git --install acme --output json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := CheckOutput(o.output); err != nil {
				return err
			}
			return runStatus(cmd.Context(), g, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.repo, "repo", "", "tenant repository: a path or a URL (required)")
	f.StringVar(&o.install, "install", "", "show only this install")
	f.StringVar(&o.source, "source", "refs/heads/main", "where installs/<id>.yaml (with each agent's key) is read")
	f.StringVarP(&o.output, "output", "o", "text", "output format: text or json")
	f.StringVar(&o.cacheDir, "cache-dir", "", "where to keep mirrors of remote repositories")
	_ = cmd.MarkFlagRequired("repo")
	return cmd
}

// installStatus is one row of `nuon status`; its JSON form is for scripts.
type installStatus struct {
	Install    string            `json:"install"`
	Commit     string            `json:"commit"`
	Desired    string            `json:"desired"`
	Applied    string            `json:"applied"`
	Generation int64             `json:"generation"`
	Phase      string            `json:"phase"`
	Refusal    *schemas.Refusal  `json:"refusal,omitempty"`
	Components []componentStatus `json:"components"`
	// Verified says whether the status commit is signed by the agentKey
	// of the install on main; VerifyError says why not.
	Verified    bool   `json:"verified"`
	VerifyError string `json:"verifyError,omitempty"`
	// Rendered is the install's desired ref now; InSync is whether the
	// agent has reported on it.
	Rendered string `json:"rendered,omitempty"`
	InSync   bool   `json:"inSync"`

	// Artifacts is the agent's artifact verification, as its status says:
	// Verified, Unverified (--insecure-skip-artifact-verification), or
	// empty from an agent that predates the field.
	Artifacts string `json:"artifacts,omitempty"`
}

type componentStatus struct {
	Name string `json:"name"`
	schemas.ComponentStatus
}

func runStatus(ctx context.Context, g *Globals, o *statusOptions) error {
	repo, err := OpenRepo(o.repo, o.cacheDir)
	if err != nil {
		return err
	}
	if err := repo.Fetch(ctx, "refs/heads/"); err != nil {
		return err
	}
	refs, err := repo.Refs(agent.StatusRefPrefix)
	if err != nil {
		return err
	}
	keys := agentKeys(repo, o.source)
	var rows []installStatus
	for name, h := range refs {
		id := strings.TrimPrefix(name.String(), agent.StatusRefPrefix)
		if o.install != "" && id != o.install {
			continue
		}
		row, err := readStatus(repo, id, h, keys[id])
		if err != nil {
			return err
		}
		rows = append(rows, row)
	}
	if o.install != "" && len(rows) == 0 {
		return fmt.Errorf("no status for install %s: %s does not exist", o.install, agent.StatusRef(o.install))
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Install < rows[j].Install })
	if o.output == "json" {
		if rows == nil {
			rows = []installStatus{}
		}
		enc := json.NewEncoder(g.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	printStatus(g.Stdout, rows)
	return nil
}

// agentKeys reads each install's agentKey from main; an unreadable main
// leaves the keys unknown, and the rows unverified.
func agentKeys(repo *gitrepo.Repo, source string) map[string]string {
	keys := map[string]string{}
	h, err := repo.Resolve(source)
	if err != nil {
		return keys
	}
	c, err := object.GetCommit(repo.Storer(), h)
	if err != nil {
		return keys
	}
	tree, err := c.Tree()
	if err != nil {
		return keys
	}
	dir, err := tree.Tree(schemas.InstallsDir)
	if err != nil {
		return keys
	}
	for _, e := range dir.Entries {
		id, ok := strings.CutSuffix(e.Name, ".yaml")
		if !ok {
			continue
		}
		f, err := dir.File(e.Name)
		if err != nil {
			continue
		}
		data, err := f.Contents()
		if err != nil {
			continue
		}
		var in struct {
			AgentKey string `yaml:"agentKey"`
		}
		if yaml.Unmarshal([]byte(data), &in) == nil {
			keys[id] = in.AgentKey
		}
	}
	return keys
}

func readStatus(repo *gitrepo.Repo, id string, h plumbing.Hash, key string) (installStatus, error) {
	row := installStatus{Install: id, Commit: h.String()}
	c, err := object.GetCommit(repo.Storer(), h)
	if err != nil {
		return row, fmt.Errorf("status of %s: %w", id, err)
	}
	f, err := c.File("status.json")
	if err != nil {
		return row, fmt.Errorf("status of %s: %w", id, err)
	}
	data, err := f.Contents()
	if err != nil {
		return row, err
	}
	var st schemas.Status
	if err := json.Unmarshal([]byte(data), &st); err != nil {
		return row, fmt.Errorf("status of %s: %s: %w", id, path.Join(agent.StatusRef(id).String(), "status.json"), err)
	}
	row.Desired, row.Applied, row.Generation, row.Phase, row.Refusal, row.Artifacts = st.Desired, st.Applied, st.Generation, st.Phase, st.Refusal, st.Artifacts
	for _, name := range slices.Sorted(maps.Keys(st.Components)) {
		row.Components = append(row.Components, componentStatus{Name: name, ComponentStatus: st.Components[name]})
	}
	if row.Components == nil {
		row.Components = []componentStatus{}
	}
	row.Verified, row.VerifyError = verifyStatus(c, id, key)
	if rendered, err := repo.Ref(agent.DesiredRef(id)); err == nil && !rendered.IsZero() {
		row.Rendered = rendered.String()
		row.InSync = rendered.String() == st.Desired || (st.Refusal != nil && st.Refusal.Commit == rendered.String())
	}
	return row, nil
}

func verifyStatus(c *object.Commit, id, key string) (bool, string) {
	if key == "" {
		return false, "no agentKey for this install on main"
	}
	pub, _, _, _, err := ssh.ParseAuthorizedKey([]byte(key))
	if err != nil {
		return false, "agentKey on main: " + err.Error()
	}
	trust := &signature.AllowedSigners{Signers: []signature.AllowedSigner{{Principals: []string{id}, Key: pub}}}
	if _, err := trust.VerifyCommit(c); err != nil {
		return false, err.Error()
	}
	return true, ""
}

func printStatus(w io.Writer, rows []installStatus) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "INSTALL\tGEN\tDESIRED\tAPPLIED\tPHASE\tSYNCED\tVERIFIED\tARTIFACTS\tFAILING")
	for _, r := range rows {
		var failing []string
		for _, c := range r.Components {
			if c.Phase != schemas.PhaseApplied {
				failing = append(failing, c.Name+"("+c.Phase+")")
			}
		}
		if r.Refusal != nil {
			failing = append([]string{"refused " + shortID(r.Refusal.Commit) + ": " + r.Refusal.Reason}, failing...)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Install, r.Generation, shortID(r.Desired), shortID(r.Applied),
			r.Phase, yesNo(r.InSync), yesNo(r.Verified), artifactsColumn(r.Artifacts), strings.Join(failing, " "))
	}
	tw.Flush()
}

// artifactsColumn shows an agent's artifact verification; UNVERIFIED
// stands out.
func artifactsColumn(s string) string {
	switch s {
	case schemas.ArtifactsVerified:
		return "verified"
	case schemas.ArtifactsUnverified:
		return "UNVERIFIED"
	case "":
		return "-"
	}
	return s
}

func shortID(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	if s == "" {
		return "-"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
