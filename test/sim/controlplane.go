package sim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// ErrNoControlPlane reports that a control-plane binary is missing; tests skip on it.
var ErrNoControlPlane = errors.New("control plane binaries missing")

const (
	// KubeVersion is the version hack/controlplane.sh builds.
	KubeVersion = "v1.36.3"
	// readyTimeout bounds the wait for each component: two shared cores under a parallel
	// build make a cold kube-apiserver take far longer than the ~2 s it needs when idle.
	readyTimeout = 120 * time.Second
	stopGrace    = 10 * time.Second
)

// binaries are the resolved paths of every executable the cluster runs.
type binaries struct {
	etcd, apiserver, controllerManager, scheduler string
}

func findBinaries(binDir, etcd string) (binaries, error) {
	if binDir == "" {
		root, err := moduleRoot()
		if err != nil {
			return binaries{}, err
		}
		binDir = filepath.Join(root, ".cache", "controlplane", KubeVersion, "bin")
	}
	if etcd == "" {
		etcd = filepath.Join(binDir, "etcd")
	}
	b := binaries{
		etcd:              etcd,
		apiserver:         filepath.Join(binDir, "kube-apiserver"),
		controllerManager: filepath.Join(binDir, "kube-controller-manager"),
		scheduler:         filepath.Join(binDir, "kube-scheduler"),
	}
	var missing []string
	for _, p := range []string{b.etcd, b.apiserver, b.controllerManager, b.scheduler} {
		if st, err := os.Stat(p); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			missing = append(missing, filepath.Base(p))
		}
	}
	if len(missing) > 0 {
		return binaries{}, fmt.Errorf("%w: %s not in %s: run hack/controlplane.sh (or make deps)",
			ErrNoControlPlane, strings.Join(missing, ", "), binDir)
	}
	return b, nil
}

// ModuleRoot is the directory holding kubefence's go.mod, found from the working directory.
func ModuleRoot() (string, error) { return moduleRoot() }

// moduleRoot walks up from the working directory to the directory holding go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find module root: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("find module root: no go.mod above the working directory; set Options.BinDir")
		}
		dir = parent
	}
}

// startEtcd runs a single-member etcd with its data under dir and waits for /health.
func (c *Cluster) startEtcd(ctx context.Context, bin string) error {
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	client := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	peer := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	args := []string{
		"--name=sim",
		"--data-dir=" + filepath.Join(c.dir, "etcd"),
		"--listen-client-urls=" + client,
		"--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=sim=" + peer,
		"--initial-cluster-state=new",
	}
	p, err := c.launch("etcd", bin, args)
	if err != nil {
		return err
	}
	c.etcdURL = client
	return waitHealthy(ctx, p, httpClient(nil), client+"/health", "", readyTimeout)
}

// startAPIServer runs kube-apiserver on a free loopback port and waits for /readyz.
func (c *Cluster) startAPIServer(ctx context.Context, bin, authz string) error {
	ports, err := freePorts(1)
	if err != nil {
		return err
	}
	addr := c.opts.Address
	c.host = "https://" + net.JoinHostPort(addr, strconv.Itoa(ports[0]))
	args := []string{
		"--etcd-servers=" + c.etcdURL,
		"--bind-address=" + addr,
		"--advertise-address=" + addr,
		"--secure-port=" + strconv.Itoa(ports[0]),
		"--cert-dir=" + filepath.Join(c.dir, "apiserver-certs"),
		"--tls-cert-file=" + c.pki.serverCert,
		"--tls-private-key-file=" + c.pki.serverKey,
		"--client-ca-file=" + c.pki.caCert,
		"--service-account-key-file=" + c.pki.saPub,
		"--service-account-signing-key-file=" + c.pki.saKey,
		"--service-account-issuer=https://kubernetes.default.svc",
		"--token-auth-file=" + c.pki.tokenFile,
		"--authorization-mode=" + authz,
		"--service-cluster-ip-range=10.0.0.0/24",
		"--endpoint-reconciler-type=none",
		"--allow-privileged=true",
	}
	args = append(args, c.opts.APIServerArgs...)
	p, err := c.launch("kube-apiserver", bin, args)
	if err != nil {
		return err
	}
	return waitHealthy(ctx, p, httpClient(c.pki.caPEM), c.host+"/readyz", c.pki.token, readyTimeout)
}

// startControllers runs kube-controller-manager and kube-scheduler side by side and waits
// for both health endpoints; each authenticates with the admin token via the kubeconfig.
func (c *Cluster) startControllers(ctx context.Context, b binaries, kcmArgs []string) error {
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	common := func(port int, certDir string) []string {
		return []string{
			"--kubeconfig=" + c.Kubeconfig,
			"--authentication-kubeconfig=" + c.Kubeconfig,
			"--authorization-kubeconfig=" + c.Kubeconfig,
			// The apiserver has no request-header CA; looking it up only logs errors.
			"--authentication-skip-lookup=true",
			"--leader-elect=false",
			"--bind-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(port),
			"--cert-dir=" + filepath.Join(c.dir, certDir),
		}
	}
	kcm := append(common(ports[0], "kcm-certs"),
		"--use-service-account-credentials=false",
		"--service-account-private-key-file="+c.pki.saKey,
		"--root-ca-file="+c.pki.caCert,
	)
	if !hasFlag(kcmArgs, "--controllers") {
		// The simulated kubelets own VolumeAttachments of the sim driver. Left running, the
		// real attach-detach controller adopts attachments it finds at its start and
		// detaches them a few seconds later, since no pod of a managed node wants them.
		kcm = append(kcm, "--controllers=*,-persistentvolume-attach-detach-controller")
	}
	kcm = append(kcm, kcmArgs...)
	kcmProc, err := c.launch("kube-controller-manager", b.controllerManager, kcm)
	if err != nil {
		return err
	}
	schedProc, err := c.launch("kube-scheduler", b.scheduler, common(ports[1], "scheduler-certs"))
	if err != nil {
		return err
	}
	insecure := httpClient(nil)
	kcmURL := "https://127.0.0.1:" + strconv.Itoa(ports[0]) + "/healthz"
	if err := waitHealthy(ctx, kcmProc, insecure, kcmURL, "", readyTimeout); err != nil {
		return err
	}
	schedURL := "https://127.0.0.1:" + strconv.Itoa(ports[1]) + "/healthz"
	if err := waitHealthy(ctx, schedProc, insecure, schedURL, "", readyTimeout); err != nil {
		return err
	}
	go c.superviseComponent("kube-controller-manager", kcmProc)
	go c.superviseComponent("kube-scheduler", schedProc)
	return nil
}

// Restart delays of a component that keeps exiting, as the kubelet's crash-loop back-off
// for a static pod: the first restart at once, then 10s doubling up to 5 minutes; a run
// longer than backoffReset starts the sequence over.
const (
	backoffFirst = 10 * time.Second
	backoffMax   = 5 * time.Minute
	backoffReset = 10 * time.Minute
)

// superviseComponent restarts kube-controller-manager or kube-scheduler whenever it exits
// before Stop, with the same arguments and a log of its own per run (name-runN.log), as
// the kubelet restarts the static pods of a real control plane. Both are meant to exit on
// a fatal inconsistency and be restarted: kube-scheduler v1.36.3 exits ("Pod updated on a
// different node than previously added to. Scheduler cache is corrupted") when, after an
// API server restart, its relist folds the deletion of an assigned pod and the creation of
// its same-named replacement into one update (kubernetes/kubernetes#141255). Without a
// restart no pod would ever be scheduled again.
func (c *Cluster) superviseComponent(name string, p *process) {
	restarts, run := 0, 1
	for {
		began := time.Now()
		select {
		case <-c.stopping:
			return
		case <-p.done:
		}
		select {
		case <-c.stopping:
			return // Stop killed it
		default:
		}
		if time.Since(began) > backoffReset {
			restarts = 0
		}
		var delay time.Duration
		if restarts > 0 {
			delay = min(backoffFirst<<(restarts-1), backoffMax)
		}
		restarts++
		run++
		c.logf("sim: %s (pid %d) exited (%v); restarting in %s, log %s", p.name, p.pid(), p.waitErr, delay, p.logPath)
		select {
		case <-c.stopping:
			return
		case <-time.After(delay):
		}
		np, err := c.launch(fmt.Sprintf("%s-run%d", name, run), p.cmd.Path, p.cmd.Args[1:])
		if err != nil {
			c.logf("sim: restart %s: %v", name, err)
			return
		}
		if c.opts.Restarted != nil {
			c.opts.Restarted(name, p.waitErr)
		}
		p = np
	}
}

// launch starts a process and records it so Stop kills it even if Start fails later. Once
// Stop has begun it launches nothing.
func (c *Cluster) launch(name, bin string, args []string) (*process, error) {
	c.mu.Lock()
	select {
	case <-c.stopping:
		c.mu.Unlock()
		return nil, fmt.Errorf("start %s: cluster stopping", name)
	default:
	}
	p, err := startProcess(c.logDir, name, bin, args)
	if err != nil {
		c.mu.Unlock()
		return nil, err
	}
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	c.logf("sim: started %s (pid %d), log %s", name, p.pid(), p.logPath)
	return p, nil
}

func hasFlag(args []string, name string) bool {
	for _, a := range args {
		if a == name || strings.HasPrefix(a, name+"=") {
			return true
		}
	}
	return false
}

// ProcessCPU is the CPU time (user and system) each running control-plane process has
// used so far, by name (etcd, kube-apiserver, ...): what a benchmark's halves cost the
// machine's other tenants.
func (c *Cluster) ProcessCPU() map[string]time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]time.Duration{}
	for _, p := range c.procs {
		select {
		case <-p.done:
		default:
			out[p.name] += procCPU(p.pid())
		}
	}
	return out
}

// procCPU is the CPU time (user and system) process pid has used.
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command name (which may hold spaces) start after the last ')'.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / 100 // USER_HZ
}
