package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/spf13/cobra"

	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/internal/signature/request"
	"nuon.dev/nuon/requests"
)

// Environment variables of the operators' commands (status, logs, debug,
// requests).
const (
	// EnvServer is the default of --server: the tenant server's URL.
	EnvServer = "NUON_SERVER_URL"
	// EnvOperatorKey is the default of --key: the operator's private key.
	EnvOperatorKey = "NUON_OPERATOR_KEY"
)

// tenantFlags say where an operator's command reads the tenant: the
// repository itself (--repo) or a tenant server (--server, with --key).
type tenantFlags struct {
	repo, server, key, cacheDir string
}

const serverHelp = "tenant server (nuon server) URL, e.g. https://nuon.example.com: read and file through it with --key, an operator key from trust/requests on main (default $" + EnvServer + ")"

func (t *tenantFlags) flags(cmd *cobra.Command, keyHelp string) {
	f := cmd.Flags()
	f.StringVar(&t.repo, "repo", "", "tenant repository: a path or a git URL (or use --server)")
	f.StringVar(&t.server, "server", os.Getenv(EnvServer), serverHelp)
	f.StringVar(&t.key, "key", os.Getenv(EnvOperatorKey), keyHelp+" (default $"+EnvOperatorKey+")")
	f.StringVar(&t.cacheDir, "cache-dir", "", "where to keep mirrors of remote repositories")
}

// useServer says whether the command goes through the tenant server: an
// explicit --repo wins over $NUON_SERVER_URL.
func (t *tenantFlags) useServer(cmd *cobra.Command) (bool, error) {
	repoSet, serverSet := cmd.Flags().Changed("repo"), cmd.Flags().Changed("server")
	switch {
	case repoSet && serverSet:
		return false, errors.New("give --repo or --server, not both")
	case repoSet:
		return false, nil
	case t.server != "":
		return true, nil
	case t.repo == "":
		return false, fmt.Errorf("where is the tenant? give --server URL (or $%s) to go through the tenant server, or --repo PATH|URL to read the repository itself", EnvServer)
	}
	return false, nil
}

// open opens the tenant: the repository, or the server's operator
// endpoint with every request signed by --key. signer is the key when
// through a server.
func (t *tenantFlags) open(cmd *cobra.Command, g *Globals) (repo *gitrepo.Repo, signer *request.Signer, err error) {
	viaServer, err := t.useServer(cmd)
	if err != nil {
		return nil, nil, err
	}
	if !viaServer {
		repo, err = g.OpenRepo(t.repo, t.cacheDir)
		return repo, nil, err
	}
	if signer, err = operatorSigner(t.key); err != nil {
		return nil, nil, err
	}
	loc := strings.TrimSuffix(t.server, "/") + requests.ServerPath
	opts := []gitrepo.Option{gitrepo.WithRequestAuth(signer.SetAuth)}
	if t.cacheDir != "" {
		opts = append(opts, gitrepo.WithCacheDir(t.cacheDir))
	}
	repo, err = gitrepo.Open(loc, opts...)
	return repo, signer, err
}

// operatorSigner loads the operator's key for signing requests to the
// server.
func operatorSigner(keyFile string) (*request.Signer, error) {
	if keyFile == "" {
		return nil, fmt.Errorf("--server needs --key (or $%s): your operator key, listed in %s on main", EnvOperatorKey, requests.TrustFile)
	}
	key, err := signature.LoadSigner(keyFile)
	if err != nil {
		return nil, fmt.Errorf("--key: %w", err)
	}
	return &request.Signer{Install: requests.KeyID(key.PublicKey()), Key: key}, nil
}

// errMoved is a filing refused because the requests ref moved: file on
// top of the new tip.
var errMoved = errors.New("the requests ref moved")

// filedAnswer is the server's answer to a filed request.
type filedAnswer struct {
	ID, Install, Commit, Desired string
}

// submit sends the request commit h of repo to the tenant server, which
// checks it, files it and renders its install.
func submit(ctx context.Context, server string, signer *request.Signer, repo *gitrepo.Repo, h plumbing.Hash) (*filedAnswer, error) {
	sub, err := requests.Submission(repo.Storer(), h)
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(sub)
	if err != nil {
		return nil, err
	}
	code, out, err := PostSigned(ctx, server, requests.ServerPath+"/requests", signer, body)
	switch {
	case err != nil:
		return nil, fmt.Errorf("file the request at %s: %w", server, err)
	case code == http.StatusConflict && strings.Contains(string(out), "file on top"):
		return nil, errMoved
	case code != http.StatusOK:
		return nil, fmt.Errorf("%s refused the request (%d %s): %s", server, code, http.StatusText(code), strings.TrimSpace(string(out)))
	}
	var a filedAnswer
	if err := json.Unmarshal(out, &a); err != nil {
		return nil, fmt.Errorf("%s: answer: %w", server, err)
	}
	return &a, nil
}

// PostSigned posts body (JSON) to path on the tenant server, the request
// signed with signer; it returns the answer's status and body (at most
// 1 MiB).
func PostSigned(ctx context.Context, server, path string, signer *request.Signer, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(server, "/")+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	client := &http.Client{Timeout: 2 * time.Minute, Transport: signer.Transport(nil)}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, out, err
}

// TenantFlags are --repo, --server, --key and --cache-dir for commands
// defined outside this package: the tenant read from the repository, or
// through the tenant server with an operator's key.
type TenantFlags struct{ tenantFlags }

// Register adds the flags to cmd; keyHelp describes --key.
func (t *TenantFlags) Register(cmd *cobra.Command, keyHelp string) { t.tenantFlags.flags(cmd, keyHelp) }

// Open opens the tenant the flags name (see tenantFlags.open).
func (t *TenantFlags) Open(cmd *cobra.Command, g *Globals) (*gitrepo.Repo, *request.Signer, error) {
	return t.tenantFlags.open(cmd, g)
}

// KeyFile is --key: the key file the command signs with.
func (t *TenantFlags) KeyFile() string { return t.key }

// Server is --server: the tenant server's URL.
func (t *TenantFlags) Server() string { return t.server }
