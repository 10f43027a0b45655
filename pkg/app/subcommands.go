package app

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/kubefence/kubefence/pkg/generated/clientset/versioned"
	"github.com/kubefence/kubefence/pkg/oncall"
)

// RunExplain is "fence-controller explain NODE": the node's evidence, its threshold, the
// rule that holds it and what happens next, written to w (pkg/oncall's Explainer). It
// reads the cluster with o.Kubeconfig and writes nothing.
func RunExplain(ctx context.Context, o AppOptions, node string, w io.Writer) error {
	if node == "" {
		return fmt.Errorf("explain: name a node: fence-controller explain NODE")
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
	return oncall.Explainer{Config: cfg, Kube: kube, Fencing: fencing, Now: time.Now, PauseConfigMap: o.PauseConfigMap}.Explain(ctx, node, w)
}

// Subcommand runs "fence-controller check" (every node's fence device read once, as a
// table) or "fence-controller explain NODE" (why the node is or is not fenced, and what
// happens next), and returns the exit code. Flags may come before or after the node.
func Subcommand(ctx context.Context, name string, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fence-controller "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o AppOptions
	fs.StringVar(&o.ConfigPath, "config", "/etc/kubefence/config.yaml", "configuration file")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig file; empty means in-cluster")
	fs.StringVar(&o.PauseConfigMap, "pause-configmap", oncall.DefaultPauseConfigMap, "the pause requests' ConfigMap (explain)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ok, err := true, error(nil)
	switch name {
	case "explain":
		node := fs.Arg(0)
		if fs.NArg() > 1 {
			if err := fs.Parse(fs.Args()[1:]); err != nil || fs.NArg() > 0 {
				fmt.Fprintf(stderr, "usage: fence-controller explain NODE [--config FILE] [--kubeconfig FILE] [--pause-configmap NAME]\n")
				return 2
			}
		}
		err = RunExplain(ctx, o, node, stdout)
	default:
		ok, err = RunCheck(ctx, o, stdout)
	}
	switch {
	case err != nil:
		fmt.Fprintln(stderr, err)
		return 1
	case !ok:
		return 1
	}
	return 0
}
