package sim

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Power is a node's BMC as the simulation sees it: the node is alive only while powered on.
type Power interface {
	PoweredOn() (bool, error)
}

// NodeSpec describes one simulated node.
type NodeSpec struct {
	Name        string
	Labels      map[string]string
	Annotations map[string]string
	// Power is read at every kubelet tick; nil means always on.
	Power Power
	// ExternalIP, when set, is reported among the node's addresses: an address no test
	// sends anything to, which storage fencing (NetworkFence) cuts off.
	ExternalIP string
	// SystemUUID is the status.nodeInfo.systemUUID the kubelet reports: its BMC's GUID as
	// the machine reads it from SMBIOS. Empty: one derived from the name, no BMC's.
	SystemUUID string
}

// Options configures Start.
type Options struct {
	// Dir is the work directory for certificates, etcd data and logs; the caller owns it.
	Dir string
	// BinDir holds kube-apiserver, kube-controller-manager and kube-scheduler. Default:
	// <module root>/.cache/controlplane/v1.36.3/bin, filled by hack/controlplane.sh.
	BinDir string
	// EtcdBin is the etcd executable; default the etcd that hack/controlplane.sh builds
	// into the control plane's bin directory.
	EtcdBin string
	// Nodes are registered before Start returns, each with its own simulated kubelet.
	Nodes []NodeSpec
	// LeaseRenewInterval is how often a live kubelet renews its node Lease; default 10s.
	LeaseRenewInterval time.Duration
	// StatusUpdateInterval is how often a live kubelet posts its Ready condition; default 10s.
	StatusUpdateInterval time.Duration
	// Authorization is kube-apiserver's --authorization-mode; default AlwaysAllow.
	Authorization string
	// ControllerManagerArgs are extra kube-controller-manager flags. Without a --controllers
	// flag here, every default controller runs except attach-detach (the kubelets do that).
	ControllerManagerArgs []string
	// Logf receives progress messages; nil discards them.
	Logf func(format string, args ...any)
	// Restarted, if set, hears of every restart of kube-controller-manager or
	// kube-scheduler after the process exited on its own (see superviseComponent).
	Restarted func(name string, exit error)
	// Address is the IP kube-apiserver serves and advertises on; default 127.0.0.1. Real
	// kubelets in network namespaces reach it on an address of the test's own bridge.
	Address string
	// NodeTokens lists the nodes that get a static bearer token of their own, as
	// system:node:<name> in system:nodes, so the Node authorizer admits their kubelets;
	// read them with NodeToken.
	NodeTokens []string
	// APIServerArgs are extra kube-apiserver flags.
	APIServerArgs []string
}

func (o *Options) setDefaults() {
	if o.LeaseRenewInterval <= 0 {
		o.LeaseRenewInterval = 10 * time.Second
	}
	if o.StatusUpdateInterval <= 0 {
		o.StatusUpdateInterval = 10 * time.Second
	}
	if o.Authorization == "" {
		o.Authorization = "AlwaysAllow"
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if o.Address == "" {
		o.Address = "127.0.0.1"
	}
}

func (o *Options) validate() error {
	var errs []error
	if o.Dir == "" {
		errs = append(errs, errors.New("options.Dir: required"))
	}
	seen := map[string]bool{}
	for i, n := range o.Nodes {
		if n.Name == "" {
			errs = append(errs, fmt.Errorf("options.Nodes[%d].Name: required", i))
		}
		if seen[n.Name] {
			errs = append(errs, fmt.Errorf("options.Nodes[%d].Name: duplicate %q", i, n.Name))
		}
		seen[n.Name] = true
	}
	return errors.Join(errs...)
}

// Cluster is a running control plane plus simulated kubelets.
type Cluster struct {
	// Kubeconfig is the path of a kubeconfig with admin (system:masters) credentials.
	Kubeconfig string
	Config     *rest.Config
	Client     kubernetes.Interface

	opts    Options
	dir     string
	logDir  string
	pki     *pki
	etcdURL string
	host    string
	logf    func(format string, args ...any)

	mu    sync.Mutex
	procs []*process
	// stopping is closed (under mu) when Stop begins: no process is launched after it.
	stopping chan struct{}

	informers informers.SharedInformerFactory
	nodes     []*Node
	nodeByNm  map[string]*Node
	cancel    context.CancelFunc // stops kubelet loops and informers
	loops     sync.WaitGroup
	stopOnce  sync.Once
	stopErr   error
}

// Start brings up etcd, kube-apiserver, kube-controller-manager, kube-scheduler and one
// simulated kubelet per node. On any failure it stops whatever it had started.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	opts.setDefaults()
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("start cluster: %w", err)
	}
	bins, err := findBinaries(opts.BinDir, opts.EtcdBin)
	if err != nil {
		return nil, fmt.Errorf("start cluster: %w", err)
	}
	c := &Cluster{opts: opts, dir: opts.Dir, logDir: filepath.Join(opts.Dir, "logs"), logf: opts.Logf,
		stopping: make(chan struct{})}
	if err := c.start(ctx, bins); err != nil {
		return nil, errors.Join(fmt.Errorf("start cluster: %w", err), c.Stop())
	}
	return c, nil
}

func (c *Cluster) start(ctx context.Context, b binaries) error {
	began := time.Now()
	if err := os.MkdirAll(c.logDir, 0o700); err != nil {
		return fmt.Errorf("create log dir: %w", err)
	}
	p, err := writePKI(filepath.Join(c.dir, "pki"), c.opts.Address, c.opts.NodeTokens)
	if err != nil {
		return err
	}
	c.pki = p
	if err := c.startEtcd(ctx, b.etcd); err != nil {
		return err
	}
	if err := c.startAPIServer(ctx, b.apiserver, c.opts.Authorization); err != nil {
		return err
	}
	c.logf("sim: kube-apiserver ready at %s after %s", c.host, time.Since(began).Round(time.Millisecond))
	if err := c.writeKubeconfig(); err != nil {
		return err
	}
	if err := c.startControllers(ctx, b, c.opts.ControllerManagerArgs); err != nil {
		return err
	}
	if err := c.ensureDefaultServiceAccount(ctx); err != nil {
		return err
	}
	if err := c.startKubelets(ctx); err != nil {
		return err
	}
	c.logf("sim: cluster ready after %s", time.Since(began).Round(time.Millisecond))
	return nil
}

// writeKubeconfig writes the admin kubeconfig and builds Config and Client from it.
func (c *Cluster) writeKubeconfig() error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["sim"] = &clientcmdapi.Cluster{Server: c.host, CertificateAuthorityData: c.pki.caPEM}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: c.pki.token}
	cfg.Contexts["sim"] = &clientcmdapi.Context{Cluster: "sim", AuthInfo: "admin"}
	cfg.CurrentContext = "sim"
	c.Kubeconfig = filepath.Join(c.dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, c.Kubeconfig); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	c.Config = &rest.Config{
		Host:            c.host,
		BearerToken:     c.pki.token,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.pki.caPEM},
		// Several kubelet loops share this client; the default 5 QPS would throttle them.
		QPS:   100,
		Burst: 200,
	}
	client, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return fmt.Errorf("build client: %w", err)
	}
	c.Client = client
	return nil
}

// ensureDefaultServiceAccount creates default/default: the ServiceAccount admission plugin
// rejects pods until it exists, and nothing else here is guaranteed to create it in time.
func (c *Cluster) ensureDefaultServiceAccount(ctx context.Context) error {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: Namespace}}
	_, err := c.Client.CoreV1().ServiceAccounts(Namespace).Create(ctx, sa, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create default service account: %w", err)
	}
	return nil
}

// NodeToken is the bearer token of node's kubelet (Options.NodeTokens), or "".
func (c *Cluster) NodeToken(node string) string { return c.pki.nodeTokens[node] }

// CAPEM is the certificate authority that signed kube-apiserver's serving certificate.
func (c *Cluster) CAPEM() []byte { return c.pki.caPEM }

// Host is kube-apiserver's URL.
func (c *Cluster) Host() string { return c.host }

// Node returns the simulated node called name, or nil.
func (c *Cluster) Node(name string) *Node {
	return c.nodeByNm[name]
}

// Nodes returns every simulated node in the order of Options.Nodes.
func (c *Cluster) Nodes() []*Node {
	return append([]*Node(nil), c.nodes...)
}

// PIDs maps each control-plane component to its process id (also its process group id).
func (c *Cluster) PIDs() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.procs))
	for _, p := range c.procs {
		out[p.name] = p.pid()
	}
	return out
}

// LogDir is where each component writes <name>.log.
func (c *Cluster) LogDir() string { return c.logDir }

// Stop ends the supervision of the control plane and the kubelet loops, then kills every
// process group it started, newest first, and waits for each. It is safe to call more than
// once; later calls return the first result.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() {
		c.mu.Lock()
		close(c.stopping)
		c.mu.Unlock()
		if c.cancel != nil {
			c.cancel()
		}
		c.loops.Wait()
		for _, n := range c.nodes {
			if n.kubelet != nil {
				n.kubelet.close()
			}
		}
		if c.informers != nil {
			c.informers.Shutdown()
		}
		c.mu.Lock()
		procs := c.procs
		c.mu.Unlock()
		var errs []error
		for i := len(procs) - 1; i >= 0; i-- {
			if err := procs[i].stop(stopGrace); err != nil {
				errs = append(errs, err)
			}
		}
		c.stopErr = errors.Join(errs...)
		c.logf("sim: cluster stopped")
	})
	return c.stopErr
}
