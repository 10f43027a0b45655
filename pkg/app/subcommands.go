package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kubefence/kubefence/pkg/generated/clientset/versioned"
	"github.com/kubefence/kubefence/pkg/maintenance"
	"github.com/kubefence/kubefence/pkg/nodeview"
	"github.com/kubefence/kubefence/pkg/oncall"
)

// RunExplain is "fence-controller explain NODE": the node's evidence, its threshold, the
// rule that holds it and what happens next, written to w (pkg/oncall's Explainer). With
// o.AnswerSocket the running replica there answers from its loop's own view (a replica
// that does not lead refuses); without it, or with nothing listening there, it reads the
// cluster with o.Kubeconfig. It writes nothing.
func RunExplain(ctx context.Context, o AppOptions, node string, w io.Writer) error {
	if node == "" {
		return fmt.Errorf("explain: name a node: fence-controller explain NODE")
	}
	if o.AnswerSocket != "" {
		err := askRunning(ctx, o.AnswerSocket, node, w)
		if !errors.Is(err, errNoAnswerer) {
			return err
		}
		fmt.Fprintf(w, "warning:   %v; computed here from what the API server holds\n", err)
	}
	cfg, err := LoadConfig(o.ConfigPath)
	if err != nil {
		return err
	}
	rc, err := restConfig(o.Kubeconfig)
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(Protobuf(rc))
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	fencing, err := versioned.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("fencing client: %w", err)
	}
	e := oncall.Explainer{Config: cfg, Kube: kube, Fencing: fencing, Now: time.Now, PauseConfigMap: o.PauseConfigMap}
	if e.Maintenance, err = readMaintenance(ctx, rc, kube); err != nil {
		// Explain still says what the rest of the cluster makes of the node, and says
		// what it could not read.
		fmt.Fprintf(w, "warning:   %v; the Machines and NodeMaintenances that may hold the node are not read here\n", err)
	}
	return e.Explain(ctx, node, w)
}

// RunDevices is "fence-controller devices": the running leader's last read of every
// node's first-level fence device (its device monitor's, at start, every
// --target-check-interval and at once after a mapping changes), asked of the replica on
// o.AnswerSocket, written to w as a table or, with format json, as oncall.Devices. A
// replica that does not lead refuses; only the leader keeps them, so there is no
// answer without one (fence-controller check reads the devices now).
func RunDevices(ctx context.Context, o AppOptions, format string, w io.Writer) error {
	if format != "table" && format != "json" {
		return fmt.Errorf("devices: -o %q: want table or json", format)
	}
	if o.AnswerSocket == "" {
		return errors.New("devices: only the running leader keeps its devices' last reads: ask it on its --answer-socket, in its container (kubectl fence status); fence-controller check reads the devices now")
	}
	var body bytes.Buffer
	if err := askAnswer(ctx, o.AnswerSocket, answerDevices, &body); err != nil {
		return fmt.Errorf("devices: %w", err)
	}
	if format == "json" {
		_, err := w.Write(body.Bytes())
		return err
	}
	var d oncall.Devices
	if err := json.Unmarshal(body.Bytes(), &d); err != nil {
		return fmt.Errorf("devices: the leader's answer: %w", err)
	}
	return oncall.PrintDevices(w, d, time.Now())
}

// explainReadTimeout bounds explain's read of the Machines and NodeMaintenances: a list
// that RBAC forbids never syncs.
const explainReadTimeout = 30 * time.Second

// readMaintenance reads the Machines and NodeMaintenances that name nodes, as the
// controller's maintenance.Reader follows them.
func readMaintenance(ctx context.Context, rc *rest.Config, kube kubernetes.Interface) (nodeview.Maintenance, error) {
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, explainReadTimeout)
	defer cancel()
	r, err := maintenance.Read(ctx, kube.Discovery(), dyn)
	if err != nil {
		return nil, fmt.Errorf("maintenance objects: %w", err)
	}
	return r, nil
}

// Usage is fence-controller's usage, its subcommands first; its flags follow it.
const Usage = `usage:
  fence-controller [flags]                     run the controller
  fence-controller --validate-config [flags]   check the --config file without a cluster, and exit
  fence-controller check [flags]               read every node's fence device once, as a table
  fence-controller devices [flags]             the running leader's last read of every node's fence device
  fence-controller explain NODE [flags]        why NODE is or is not fenced, and what happens next
  fence-controller uninstall-check [flags]     what an uninstall now would leave in place
"fence-controller SUBCOMMAND -h" lists a subcommand's flags.

flags:
`

// Subcommands are the names Subcommand runs.
var Subcommands = []string{"check", "devices", "explain", "uninstall-check"}

// Subcommand runs "fence-controller check" (every node's fence device read once, as a
// table), "fence-controller devices" (the running leader's last read of each, asked on
// --answer-socket), "fence-controller explain NODE" (why the node is or is not fenced, and what
// happens next) or "fence-controller uninstall-check" (what an uninstall now would leave
// in place; exit code 1 when anything, unless --force), and returns the exit code. Flags
// may come before or after the node.
func Subcommand(ctx context.Context, name string, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fence-controller "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o AppOptions
	fs.StringVar(&o.ConfigPath, "config", "/etc/kubefence/config.yaml", "configuration file")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig file; empty means in-cluster")
	fs.StringVar(&o.PauseConfigMap, "pause-configmap", oncall.DefaultPauseConfigMap, "the pause requests' ConfigMap (explain)")
	fs.StringVar(&o.AnswerSocket, "answer-socket", "", "explain, devices: ask the running replica on this unix socket (the controller's --answer-socket), which answers from its loop's own view if it leads")
	output := fs.String("o", "table", "devices: table or json")
	force := fs.Bool("force", false, "uninstall-check: print what stays in place, and exit 0 all the same")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ok, err := true, error(nil)
	switch name {
	case "explain":
		node := fs.Arg(0)
		if fs.NArg() > 1 {
			if err := fs.Parse(fs.Args()[1:]); err != nil || fs.NArg() > 0 {
				fmt.Fprintf(stderr, "usage: fence-controller explain NODE [--config FILE] [--kubeconfig FILE] [--pause-configmap NAME] [--answer-socket PATH]\n")
				return 2
			}
		}
		err = RunExplain(ctx, o, node, stdout)
	case "devices":
		if fs.NArg() > 0 {
			fmt.Fprintf(stderr, "usage: fence-controller devices --answer-socket PATH [-o table|json]\n")
			return 2
		}
		err = RunDevices(ctx, o, *output, stdout)
	case "uninstall-check":
		if fs.NArg() > 0 {
			fmt.Fprintf(stderr, "usage: fence-controller uninstall-check [--kubeconfig FILE] [--force]\n")
			return 2
		}
		var c UninstallCheck
		if c, err = uninstallClients(o.Kubeconfig); err == nil {
			ok, err = RunUninstallCheck(ctx, c, *force, stdout)
		}
	default:
		ok, err = RunCheck(ctx, o, stdout)
	}
	return exitCode(ok, err, stderr)
}

// exitCode is a subcommand's: 1 when it failed (the error written to stderr) or found
// what it reports (!ok), else 0.
func exitCode(ok bool, err error, stderr io.Writer) int {
	switch {
	case err != nil:
		fmt.Fprintln(stderr, err)
		return 1
	case !ok:
		return 1
	}
	return 0
}
