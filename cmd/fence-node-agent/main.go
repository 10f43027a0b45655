// Command fence-node-agent runs on every node (the chart's DaemonSet): it reads the open
// NodeFences, feeds the node's watchdog while the node may live, and reports its
// watchdog, boot and the NodeFences it holds in a Lease (pkg/nodeagent).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json
	"k8s.io/klog/v2"

	"github.com/kubefence/kubefence/pkg/buildinfo"
	"github.com/kubefence/kubefence/pkg/generated/clientset/versioned"
	"github.com/kubefence/kubefence/pkg/nodeagent"
	"github.com/kubefence/kubefence/pkg/watchdog"
)

type options struct {
	kubeconfig, bootIDFile, watchdog, health string
	peerBind, peerAdvertise, peerKeyFile     string
	peerProbe                                time.Duration
	version, allowNowayout                   bool
	qps                                      float64
}

func main() {
	var o options
	var c nodeagent.Config
	fs := flag.CommandLine
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file; empty means in-cluster")
	fs.StringVar(&c.Node, "node-name", os.Getenv("NODE_NAME"), "the node this agent runs on (default $NODE_NAME, from the downward API's spec.nodeName)")
	fs.StringVar(&c.Namespace, "namespace", os.Getenv("POD_NAMESPACE"), "namespace of the report Lease (default $POD_NAMESPACE)")
	fs.StringVar(&o.bootIDFile, "boot-id-file", "/proc/sys/kernel/random/boot_id", "file holding the boot ID the agent reports")
	fs.DurationVar(&c.Timing.Isolation, "isolation", 10*time.Second, "how long the node may go without a read of the NodeFences before it stops feeding its watchdog")
	fs.DurationVar(&c.Timing.ReadEvery, "read-interval", 2*time.Second, "how often the NodeFences are read (a quorum read); at most a third of --isolation")
	fs.DurationVar(&c.Timing.ReportEvery, "report-interval", 30*time.Second, "how often the report Lease is written when nothing in it changed")
	fs.StringVar(&o.watchdog, "watchdog", "", "the watchdog to feed: a device of the Linux watchdog API such as /dev/watchdog (needs --peer-bind-address), or unix:PATH for an emulated one (tests); empty for none")
	fs.DurationVar(&c.WatchdogTimeout, "watchdog-timeout", 5*time.Second, "the watchdog's countdown")
	fs.BoolVar(&o.allowNowayout, "watchdog-allow-nowayout", false, "arm a watchdog device whose driver has nowayout (or whose nowayout state sysfs does not give): it never stops once opened, so every stop of this agent resets the node unless the next agent opens it within --watchdog-timeout")
	fs.StringVar(&o.health, "health-probe-bind-address", ":8082", "address of /healthz (for the kubelet's probe) and /metrics, plain HTTP: the metrics say what the agent does, nothing secret")
	fs.StringVar(&o.peerBind, "peer-bind-address", "", "host:port where the agent answers the other agents (UDP and TCP); empty: no peers, and only the agent's own reads keep its node alive")
	fs.StringVar(&o.peerAdvertise, "peer-advertise-address", "", "host:port the other agents dial; default: the bind address")
	fs.StringVar(&o.peerKeyFile, "peer-key-file", "", "file holding the peers' shared key (16, 24 or 32 bytes): every packet between agents is authenticated and encrypted with it")
	fs.DurationVar(&o.peerProbe, "peer-probe-interval", 0, "how often one peer is probed, in turn (default: isolation/20)")
	fs.Float64Var(&o.qps, "kube-api-qps", 5, "requests per second to the API server")
	fs.BoolVar(&o.version, "version", false, "print the version and exit")
	logging := logsapi.NewLoggingConfiguration()
	logsapi.AddGoFlags(logging, fs)
	flag.Parse()
	if err := logsapi.ValidateAndApply(logging, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if o.version {
		fmt.Println(buildinfo.String("fence-node-agent"))
		return
	}
	if err := run(o, c); err != nil {
		klog.ErrorS(err, "fence-node-agent failed")
		klog.Flush()
		os.Exit(1)
	}
}

func run(o options, c nodeagent.Config) error {
	boot, err := os.ReadFile(o.bootIDFile)
	if err != nil {
		return fmt.Errorf("--boot-id-file: %w", err)
	}
	c.BootID = strings.TrimSpace(string(boot))
	if c.Watchdog, err = device(o.watchdog, o.peerBind != "", o.allowNowayout); err != nil {
		return err
	}
	if c.Peers, err = peers(o, c); err != nil {
		return err
	}
	if err := c.Validate(); err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return fmt.Errorf("--kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = float32(o.qps), int(2*o.qps)
	cfg.UserAgent = rest.DefaultKubernetesUserAgent() + " fence-node-agent"
	if c.Clients.Kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	if c.Clients.Fencing, err = versioned.NewForConfig(cfg); err != nil {
		return err
	}
	if c.Clients.Metadata, err = metadata.NewForConfig(cfg); err != nil {
		return err
	}
	a := nodeagent.New(c)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ln, err := net.Listen("tcp", o.health)
	if err != nil {
		return fmt.Errorf("--health-probe-bind-address: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if err := a.Healthy(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.Handle("/metrics", promhttp.HandlerFor(a.Metrics(), promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.ErrorS(err, "Health server failed")
		}
	}()
	defer srv.Close()
	klog.InfoS("Starting", "version", buildinfo.String("fence-node-agent"), "node", c.Node, "isolation", c.Timing.Isolation, "watchdog", o.watchdog)
	return a.Run(ctx)
}

// peers is the peer configuration the --peer-* flags give, nil without them.
func peers(o options, c nodeagent.Config) (*nodeagent.PeerConfig, error) {
	if o.peerBind == "" {
		return nil, nil
	}
	bindHost, bindPort, err := hostPort("--peer-bind-address", o.peerBind)
	if err != nil {
		return nil, err
	}
	pc := &nodeagent.PeerConfig{Node: c.Node, BindAddr: bindHost, BindPort: bindPort, ProbeInterval: o.peerProbe}
	if o.peerAdvertise != "" {
		if pc.AdvertiseAddr, pc.AdvertisePort, err = hostPort("--peer-advertise-address", o.peerAdvertise); err != nil {
			return nil, err
		}
	}
	if pc.ProbeInterval == 0 {
		pc.ProbeInterval = c.Timing.Isolation / 20
	}
	if o.peerKeyFile == "" {
		return nil, fmt.Errorf("--peer-key-file: needed with --peer-bind-address: an answer that keeps a node alive must come from an agent")
	}
	if pc.Key, err = os.ReadFile(o.peerKeyFile); err != nil {
		return nil, fmt.Errorf("--peer-key-file: %w", err)
	}
	return pc, nil
}

func hostPort(flag, v string) (string, int, error) {
	host, port, err := nodeagent.SplitAddress(v)
	if err != nil {
		return "", 0, fmt.Errorf("%s: %w", flag, err)
	}
	return host, port, nil
}

// device is the watchdog named by --watchdog: unix:PATH for an emulated one, any other
// path for a device of the Linux watchdog API (watchdog.Open). A device needs peers:
// without them, an API server outage longer than --isolation would reset every node.
func device(spec string, peers, allowNowayout bool) (watchdog.Device, error) {
	if spec == "" {
		return nil, nil
	}
	d, err := watchdog.Open(spec)
	if err != nil {
		return nil, fmt.Errorf("--watchdog: %w", err)
	}
	l, isDevice := d.(*watchdog.Linux)
	if isDevice && !peers {
		return nil, fmt.Errorf("--watchdog %s: a watchdog device needs --peer-bind-address: without peers, an API server outage longer than --isolation resets every node", spec)
	}
	if isDevice {
		l.AllowNowayout = allowNowayout
	}
	return d, nil
}
