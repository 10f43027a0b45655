package sim

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// process is one control-plane binary running in its own process group, so Stop can kill it
// and anything it forked by group id without touching unrelated processes.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed once cmd.Wait returned
	waitErr error
}

// startProcess launches bin with args, logging stdout and stderr to dir/name.log; env
// entries are added to the test's environment.
func startProcess(dir, name, bin string, args []string, env ...string) (*process, error) {
	logPath := filepath.Join(dir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("create %s log: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.Dir = dir
	// Pdeathsig is the safety net when the test binary dies without running cleanups
	// (go test timeout): the kernel then kills the child instead of leaving it orphaned.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the process group, escalates to SIGKILL after grace and waits for
// the leader to be reaped, so its /proc entry is gone when stop returns.
func (p *process) stop(grace time.Duration) error {
	pgid := p.pid()
	if !p.exited() {
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(grace):
		}
	}
	// Kill the group even when the leader is gone: a forked child may still hold it.
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill %s (pgid %d): %w", p.name, pgid, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(30 * time.Second):
		return fmt.Errorf("stop %s (pid %d): not reaped after SIGKILL", p.name, pgid)
	}
}

// logTail returns the last lines of the process log, for error messages.
func (p *process) logTail(lines int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return ""
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// waitHealthy polls url until it answers 200, the process exits or ctx or timeout ends.
// client may carry a CA and a bearer token.
func waitHealthy(ctx context.Context, p *process, client *http.Client, url, token string,
	timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var last string
	for {
		ok, msg := probe(ctx, client, url, token)
		if ok {
			return nil
		}
		last = msg
		select {
		case <-p.done:
			return fmt.Errorf("%s exited (%v) before ready; log %s:\n%s",
				p.name, p.waitErr, p.logPath, p.logTail(20))
		case <-ctx.Done():
			return fmt.Errorf("%s not ready at %s (last: %s): %w; log %s:\n%s",
				p.name, url, last, ctx.Err(), p.logPath, p.logTail(20))
		case <-tick.C:
		}
	}
}

func probe(ctx context.Context, client *http.Client, url, token string) (bool, string) {
	reqCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(reqCtx, http.MethodGet, url, nil)
	if err != nil {
		return false, err.Error()
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode == http.StatusOK {
		return true, ""
	}
	return false, fmt.Sprintf("%d %s", resp.StatusCode, bytes.TrimSpace(body))
}

// httpClient trusts caPEM, or (caPEM nil) skips verification: KCM and the scheduler serve
// health checks with a self-signed certificate of their own on loopback.
func httpClient(caPEM []byte) *http.Client {
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if caPEM == nil {
		tlsConfig.InsecureSkipVerify = true
	} else {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(caPEM)
		tlsConfig.RootCAs = pool
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig}}
}

// freePorts reserves n distinct loopback ports. The listeners are held until all are chosen
// so the kernel cannot hand out the same port twice.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("reserve port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
