package sim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/configfile"
	"github.com/kubefence/kubefence/pkg/testpoint"
	"github.com/kubefence/kubefence/test/sim/bmc"
	"github.com/kubefence/kubefence/test/sim/redfish"
)

// Names the harness gives to what it installs.
const (
	ControllerNamespace = "kubefence-system"
	BMCSecret           = "bmc-credentials"
	IPMIAddressKey      = "fencing.kubefence.io/ipmi-address"
	ipmiAgent           = "ipmi"
)

// HarnessOptions configures a simulated cluster with kubefence installed.
type HarnessOptions struct {
	// Dir is the work directory; the caller owns it.
	Dir string
	// Nodes is how many nodes (node-1 … node-N), each with its own ipmi_sim BMC.
	Nodes int
	// BinDir holds fence-controller and fence-agent-ipmi; empty means build them into Dir.
	BinDir string
	// Config adjusts the controller configuration the harness writes.
	Config func(*v1alpha1.Config)
	// Cluster adjusts the cluster options (kubelet intervals, controller-manager flags).
	Cluster func(*Options)
	// BMC adjusts each node's BMC options (a slow or broken BMC).
	BMC func(node string, o *bmc.IPMIOptions)
	// RedfishNodes is how many of the nodes (the last ones) have a Redfish BMC instead of
	// ipmi_sim; they are fenced by the same agent binary speaking Redfish over TLS.
	RedfishNodes int
	Logf         func(format string, args ...any)
}

// Harness is a simulated cluster with ipmi_sim BMCs and kubefence's CRD, credentials and
// configuration installed. The controller is started separately (StartController).
type Harness struct {
	Cluster    *Cluster
	BMCs       map[string]*bmc.IPMISim
	Redfish    map[string]*redfish.Server
	redfishCA  *redfish.CA
	machines   map[string]*machine
	ConfigPath string
	Config     *v1alpha1.Config
	dir, bin   string
	logf       func(string, ...any)

	procsMu sync.Mutex
	procs   []*process // controllers and remote agents, guarded by procsMu
}

// track records a process the harness started, so that Stop stops it.
func (h *Harness) track(p *process) {
	h.procsMu.Lock()
	h.procs = append(h.procs, p)
	h.procsMu.Unlock()
}

// processes returns the processes the harness started itself.
func (h *Harness) processes() []*process {
	h.procsMu.Lock()
	defer h.procsMu.Unlock()
	return slices.Clone(h.procs)
}

// StartHarness starts BMCs, the cluster and installs kubefence's prerequisites. On
// failure it stops what it started.
func StartHarness(ctx context.Context, o HarnessOptions) (h *Harness, err error) {
	if o.Nodes <= 0 {
		o.Nodes = 3
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	h = &Harness{BMCs: map[string]*bmc.IPMISim{}, Redfish: map[string]*redfish.Server{}, machines: map[string]*machine{},
		dir: o.Dir, bin: o.BinDir, logf: o.Logf}
	defer func() {
		if err != nil {
			_ = h.Stop()
			h = nil
		}
	}()
	if h.bin == "" {
		h.bin = filepath.Join(o.Dir, "bin")
		if err := BuildBinaries(ctx, h.bin); err != nil {
			return h, err
		}
	}
	if h.bin, err = filepath.Abs(h.bin); err != nil {
		return h, err
	}
	opts := Options{Dir: filepath.Join(o.Dir, "cluster"), Logf: o.Logf}
	if o.RedfishNodes > 0 {
		if h.redfishCA, err = redfish.NewCA(); err != nil {
			return h, err
		}
	}
	for i := 1; i <= o.Nodes; i++ {
		name := fmt.Sprintf("node-%d", i)
		if i > o.Nodes-o.RedfishNodes {
			spec, err := h.startRedfish(name, h.redfishCA)
			if err != nil {
				return h, err
			}
			opts.Nodes = append(opts.Nodes, spec)
			continue
		}
		bo := bmc.IPMIOptions{Dir: filepath.Join(o.Dir, "bmc", name), PoweredOn: true}
		if o.BMC != nil {
			o.BMC(name, &bo)
		}
		b, err := bmc.StartIPMI(ctx, bo)
		if err != nil {
			return h, fmt.Errorf("start BMC of %s: %w", name, err)
		}
		h.BMCs[name] = b
		h.machines[name] = &machine{bmc: b}
		opts.Nodes = append(opts.Nodes, NodeSpec{Name: name, Power: h.machines[name], SystemUUID: b.SystemUUID(),
			Annotations: map[string]string{IPMIAddressKey: net.JoinHostPort(b.Host(), strconv.Itoa(b.Port()))}})
	}
	if o.Cluster != nil {
		o.Cluster(&opts)
	}
	if h.Cluster, err = Start(ctx, opts); err != nil {
		return h, err
	}
	if err := InstallCRD(ctx, h.Cluster); err != nil {
		return h, err
	}
	if err := h.installCredentials(ctx); err != nil {
		return h, err
	}
	return h, h.writeConfig(o.Config)
}

// machine is a node's hardware as the simulated kubelet sees it: powered as its BMC says,
// unless it is wired to ignore the BMC (the false "off" every fence agent fears).
type machine struct {
	bmc        *bmc.IPMISim
	ignoresBMC atomic.Bool
}

func (m *machine) PoweredOn() (bool, error) {
	if m.ignoresBMC.Load() {
		return true, nil
	}
	return m.bmc.PoweredOn()
}

// MachineIgnoresBMC makes node keep running whatever its BMC reports.
// Only nodes with an ipmi_sim BMC have such a machine.
func (h *Harness) MachineIgnoresBMC(node string) { h.machines[node].ignoresBMC.Store(true) }

// BuildBinaries builds kubefence's commands into dir with the go tool, the controller
// with its test pause points (testpoint.BuildTag), which the release leaves out.
func BuildBinaries(ctx context.Context, dir string) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-tags", testpoint.BuildTag, "-o", dir+string(os.PathSeparator), "./cmd/fence-controller", "./cmd/fence-agent-ipmi")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build kubefence binaries: %w\n%s", err, out)
	}
	return nil
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// InstallCRD creates kubefence's CRDs (NodeFence, KubefenceRemediation and its
// template) and waits until they are established.
func InstallCRD(ctx context.Context, c *Cluster) error { return InstallCRDs(ctx, c, v1alpha1.CRDs()) }

func (h *Harness) installCredentials(ctx context.Context) error {
	cs := h.Cluster.Client
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ControllerNamespace}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", ControllerNamespace, err)
	}
	// The first node's BMC decides the shared credentials, so that a test can give
	// another BMC a password of its own.
	names := make([]string, 0, len(h.BMCs))
	for name := range h.BMCs {
		names = append(names, name)
	}
	sort.Strings(names)
	any := h.BMCs[names[0]]
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ControllerNamespace, Name: BMCSecret},
		StringData: map[string]string{"username": any.User(), "password": any.Password()},
	}
	if _, err := cs.CoreV1().Secrets(ControllerNamespace).Create(ctx, sec, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create secret %s: %w", BMCSecret, err)
	}
	if rs := h.redfishSecret(); rs != nil {
		if _, err := cs.CoreV1().Secrets(ControllerNamespace).Create(ctx, rs, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create secret %s: %w", rs.Name, err)
		}
	}
	return nil
}

// writeConfig installs the agent into a plugin directory and writes the controller's
// configuration file, with its checksum.
func (h *Harness) writeConfig(adjust func(*v1alpha1.Config)) error {
	pluginDir := filepath.Join(h.dir, "plugins")
	if err := os.MkdirAll(pluginDir, 0o755); err != nil {
		return err
	}
	sum, err := copyFile(filepath.Join(h.bin, "fence-agent-ipmi"), filepath.Join(pluginDir, ipmiAgent))
	if err != nil {
		return fmt.Errorf("install agent: %w", err)
	}
	cfg := &v1alpha1.Config{
		PluginDir:      pluginDir,
		LeaderElection: v1alpha1.LeaderElection{Namespace: ControllerNamespace},
		Agents: []v1alpha1.Agent{{
			Name: ipmiAgent, SHA256: sum,
			Params:    map[string]string{"cipherSuite": "3"},
			SecretRef: &v1alpha1.SecretRef{Namespace: ControllerNamespace, Name: BMCSecret},
			Target:    v1alpha1.TargetSource{Annotation: IPMIAddressKey},
		}},
		Policies: []v1alpha1.Policy{{Name: "default", Levels: []v1alpha1.Level{{Agents: []string{ipmiAgent}}}}},
	}
	if h.redfishCA != nil {
		h.redfishConfig(cfg, h.redfishCA, sum)
	}
	if adjust != nil {
		adjust(cfg)
	}
	return h.saveConfig(cfg)
}

// RewriteConfig changes the configuration file; replicas started afterwards read it.
func (h *Harness) RewriteConfig(adjust func(*v1alpha1.Config)) error {
	cfg := h.Config.DeepCopy()
	adjust(cfg)
	return h.saveConfig(cfg)
}

func (h *Harness) saveConfig(cfg *v1alpha1.Config) error {
	cfg.APIVersion, cfg.Kind = v1alpha1.ConfigAPIVersion, v1alpha1.ConfigKind
	// Written out, an unset duration reads "0s", which the controller refuses as an
	// explicit zero: the file carries the defaults instead.
	cfg.Default()
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return err
	}
	if h.Config, err = configfile.Parse(data); err != nil {
		return fmt.Errorf("harness wrote an invalid config: %w", err)
	}
	h.ConfigPath = filepath.Join(h.dir, "config.yaml")
	return os.WriteFile(h.ConfigPath, data, 0o644)
}

func copyFile(src, dst string) (string, error) {
	in, err := os.Open(src)
	if err != nil {
		return "", err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o755)
	if err != nil {
		return "", err
	}
	hash := sha256.New()
	if _, err := io.Copy(io.MultiWriter(out, hash), in); err != nil {
		out.Close()
		return "", err
	}
	return hex.EncodeToString(hash.Sum(nil)), out.Close()
}

// Replica is one fence-controller process (with its agent plugins, in its process group).
type Replica struct{ p *process }

// StartController starts a fence-controller replica; name distinguishes replicas' logs.
func (h *Harness) StartController(name string, extraArgs ...string) (*Replica, error) {
	return h.StartControllerWithEnv(name, nil, extraArgs...)
}

// StartControllerWithEnv is StartController with env added to the replica's environment.
func (h *Harness) StartControllerWithEnv(name string, env []string, extraArgs ...string) (*Replica, error) {
	// Plain metrics, as in a trusted network: tests scrape without a token. Authenticated
	// metrics are TestMetricsAuthentication's and TestRenderedRBACFencesAndNothingMore's,
	// which pass --metrics-secure=true (the last occurrence of a flag wins).
	args := []string{"--config", h.ConfigPath, "--kubeconfig", h.Cluster.Kubeconfig,
		"--health-probe-bind-address", "127.0.0.1:0", "--metrics-bind-address", "127.0.0.1:0", "--metrics-secure=false", "-v=2"}
	args = append(args, extraArgs...)
	p, err := startProcess(h.dir, name, filepath.Join(h.bin, "fence-controller"), args, env...)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	h.track(p)
	return &Replica{p: p}, nil
}

// Signal sends sig to the replica's whole process group (SIGKILL: it dies with its agents
// mid-call; SIGSTOP/SIGCONT: a paused replica, as after a long GC or a frozen VM).
func (r *Replica) Signal(sig syscall.Signal) error {
	if err := syscall.Kill(-r.p.pid(), sig); err != nil {
		return fmt.Errorf("signal %s %s: %w", r.p.name, sig, err)
	}
	return nil
}

// Terminate sends SIGTERM to the controller process alone, as the kubelet does to a
// container's main process; its agents are its own to stop.
func (r *Replica) Terminate() error {
	if err := syscall.Kill(r.p.pid(), syscall.SIGTERM); err != nil {
		return fmt.Errorf("terminate %s: %w", r.p.name, err)
	}
	return nil
}

// Done is closed when the replica's process has exited.
func (r *Replica) Done() <-chan struct{} { return r.p.done }

// ExitCode is the replica's exit code once Done is closed; -1 when killed by a signal.
func (r *Replica) ExitCode() int { return r.p.cmd.ProcessState.ExitCode() }

// Log returns the replica's log so far.
func (r *Replica) Log() string {
	b, _ := os.ReadFile(r.p.logPath)
	return string(b)
}

// WaitLeader waits until some replica holds the controller's Lease and returns its identity.
func (h *Harness) WaitLeader(ctx context.Context) (string, error) {
	var holder string
	le := h.Config.LeaderElection
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := h.Cluster.Client.CoordinationV1().Leases(le.Namespace).Get(ctx, le.Name, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
			return false, nil
		}
		holder = *l.Spec.HolderIdentity
		return true, nil
	})
	if err != nil {
		return "", fmt.Errorf("no controller became leader: %w", err)
	}
	return holder, nil
}

// PIDs returns every process the harness started, by name, for leak checks.
func (h *Harness) PIDs() map[string]int {
	pids := map[string]int{}
	if h.Cluster != nil {
		for k, v := range h.Cluster.PIDs() {
			pids[k] = v
		}
	}
	for name, b := range h.BMCs {
		pids["bmc-"+name] = b.PID()
	}
	for _, p := range h.processes() {
		pids[p.name] = p.pid()
	}
	return pids
}

// Stop stops controllers, the cluster and the BMCs, by PID, and reports every failure.
func (h *Harness) Stop() error {
	var errs []error
	for _, p := range h.processes() {
		errs = append(errs, p.stop(5*time.Second))
	}
	if h.Cluster != nil {
		errs = append(errs, h.Cluster.Stop())
	}
	for _, b := range h.BMCs {
		errs = append(errs, b.Stop())
	}
	for _, r := range h.Redfish {
		r.Close()
	}
	return errors.Join(errs...)
}
