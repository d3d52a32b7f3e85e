// Command probe is the program of TestNodeRestrictedPod's pod: it reports
// what the pod may do to its own container, one "key: value" line each,
// to stdout and /dev/termination-log, and exits 0 once it has tried all.
// With the argument "wait" it reports nothing and waits for SIGTERM; with
// "api" it reports only the status of its in-cluster request for /api.
package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "wait" {
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGTERM)
		<-c
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "api" {
		msg := "api: " + apiStatus()
		fmt.Println(msg)
		_ = os.WriteFile("/dev/termination-log", []byte(msg+"\n"), 0o644)
		return
	}
	var lines []string
	report := func(key string, err error) {
		v := "ok"
		if err != nil {
			v = err.Error()
		}
		lines = append(lines, key+": "+v)
	}
	report("write /probe", os.WriteFile("/probe", []byte("x"), 0o644))
	report("write /tmp/probe", os.WriteFile("/tmp/probe", []byte("x"), 0o644))
	lines = append(lines, fmt.Sprintf("uid: %d", os.Getuid()))
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "Seccomp:") || strings.HasPrefix(l, "NoNewPrivs:") || strings.HasPrefix(l, "CapEff:") {
				k, v, _ := strings.Cut(l, ":")
				lines = append(lines, strings.ToLower(k)+": "+strings.TrimSpace(v))
			}
		}
	}
	out := strings.Join(lines, "\n") + "\n"
	fmt.Print(out)
	_ = os.WriteFile("/dev/termination-log", []byte(out), 0o644)
}

// apiStatus asks the API server for /api as an in-cluster client does:
// the kubernetes Service's address from the environment, the service
// account's token and CA from their mount.
func apiStatus() string {
	const sa = "/var/run/secrets/kubernetes.io/serviceaccount/"
	token, err := os.ReadFile(sa + "token")
	if err != nil {
		return err.Error()
	}
	ca, err := os.ReadFile(sa + "ca.crt")
	if err != nil {
		return err.Error()
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return "no certificate in ca.crt"
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	url := "https://" + net.JoinHostPort(os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")) + "/api"
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err.Error()
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	resp, err := c.Do(req)
	if err != nil {
		return err.Error()
	}
	resp.Body.Close()
	return strconv.Itoa(resp.StatusCode)
}
