package sim

import (
	"context"
	"fmt"
	"strings"
)

// StopAPIServer stops kube-apiserver (SIGTERM, then SIGKILL after the grace period) and
// waits for it to exit. etcd, the controllers and the kubelets keep running and retry.
func (c *Cluster) StopAPIServer() error {
	p := c.apiServerProcess()
	if p == nil {
		return fmt.Errorf("stop kube-apiserver: not started")
	}
	if err := p.stop(stopGrace); err != nil {
		return fmt.Errorf("stop kube-apiserver: %w", err)
	}
	c.logf("sim: kube-apiserver (pid %d) stopped", p.pid())
	return nil
}

// StartAPIServer starts kube-apiserver again with the arguments of its last run, on the
// same port, so every client and kubeconfig stays valid, and waits for /readyz.
func (c *Cluster) StartAPIServer(ctx context.Context) error {
	p := c.apiServerProcess()
	if p == nil {
		return fmt.Errorf("start kube-apiserver: never started")
	}
	if !p.exited() {
		return fmt.Errorf("start kube-apiserver: pid %d still running", p.pid())
	}
	c.mu.Lock()
	n := 0
	for _, q := range c.procs {
		if strings.HasPrefix(q.name, "kube-apiserver") {
			n++
		}
	}
	c.mu.Unlock()
	// A log of its own per run: startProcess truncates the file it is given.
	np, err := c.launch(fmt.Sprintf("kube-apiserver-run%d", n+1), p.cmd.Path, p.cmd.Args[1:])
	if err != nil {
		return err
	}
	return waitHealthy(ctx, np, httpClient(c.pki.caPEM), c.host+"/readyz", c.pki.token, readyTimeout)
}

// RestartAPIServer stops kube-apiserver and starts it again once down returns (a timer, a
// wait for a condition, or nil for at once).
func (c *Cluster) RestartAPIServer(ctx context.Context, down func(context.Context) error) error {
	if err := c.StopAPIServer(); err != nil {
		return err
	}
	if down != nil {
		if err := down(ctx); err != nil {
			return err
		}
	}
	return c.StartAPIServer(ctx)
}

// apiServerProcess is the most recent kube-apiserver process.
func (c *Cluster) apiServerProcess() *process {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := len(c.procs) - 1; i >= 0; i-- {
		if strings.HasPrefix(c.procs[i].name, "kube-apiserver") {
			return c.procs[i]
		}
	}
	return nil
}
