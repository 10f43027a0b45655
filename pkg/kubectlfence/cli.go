package kubectlfence

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kubefence/kubefence/pkg/generated/clientset/versioned"
)

// Globals are the flags every command takes: where the cluster and the release are, and
// how to print.
type Globals struct {
	Kubeconfig string
	Context    string
	Namespace  string
	// Release is the Helm release (the controller Deployment's app.kubernetes.io/instance),
	// or the full name of a release that has no Deployment.
	Release string
	// Lease names the leader Lease when config.leaderElection.name renamed it.
	Lease  string
	Output string
}

// CLI runs `kubectl fence`.
type CLI struct {
	Stdout, Stderr io.Writer
	Now            func() time.Time
	// Connect makes the clients of g; nil connects with the kubeconfig (Kubeconfig).
	Connect func(g Globals) (Clients, Exec, error)
}

// session is one command's run: its flags, clients and output.
type session struct {
	Globals
	reason, entry, incident string
	all                     bool
	cli                     CLI
	clients                 Clients
	exec                    Exec
}

// Run runs args (without the program name) and returns the exit code: 0, 1 on an error,
// 2 on a usage error, or the exit code of the leader's explain or check.
func (c CLI) Run(ctx context.Context, args []string) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(c.Stdout, Usage)
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(c.Stderr, "kubectl fence: unknown command %q\n\n%s", args[0], Usage)
		return 2
	}
	s := &session{cli: c}
	fs := s.flags(args[0])
	pos, err := parseInterspersed(fs, args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil || len(pos) < cmd.min || len(pos) > cmd.max {
		fmt.Fprintf(c.Stderr, "usage: kubectl fence %s\n", cmd.usage)
		return 2
	}
	connect := c.Connect
	if connect == nil {
		connect = Kubeconfig
	}
	if s.clients, s.exec, err = connect(s.Globals); err == nil {
		err = cmd.run(ctx, s, pos)
	}
	var exit ExitError
	switch {
	case errors.As(err, &exit):
		return exit.Code
	case err != nil:
		fmt.Fprintf(c.Stderr, "error: %v\n", err)
		return 1
	}
	return 0
}

// flags are the flag set of command name: the globals and the words' own.
func (s *session) flags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("kubectl fence "+name, flag.ContinueOnError)
	fs.SetOutput(s.cli.Stderr)
	fs.StringVar(&s.Kubeconfig, "kubeconfig", "", "the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)")
	fs.StringVar(&s.Context, "context", "", "the kubeconfig context")
	for _, n := range []string{"n", "namespace"} {
		fs.StringVar(&s.Namespace, n, DefaultNamespace, "the release's namespace")
	}
	fs.StringVar(&s.Release, "release", "", "the Helm release, when the namespace holds several (its full name, to one who may not read its Deployment)")
	fs.StringVar(&s.Lease, "lease", "", "the leader Lease, when config.leaderElection.name renamed it")
	for _, n := range []string{"o", "output"} {
		fs.StringVar(&s.Output, n, OutputTable, "output: table, json or yaml")
	}
	fs.StringVar(&s.reason, "reason", "", "why (pause, confirm-off, cancel, fence)")
	fs.StringVar(&s.entry, "name", DefaultPauseEntry, "the pause request's name (pause, resume)")
	fs.StringVar(&s.incident, "incident", "", "confirm-off: the node's incident (default: its newest)")
	fs.BoolVar(&s.all, "all", false, "resume: lift every pause request")
	return fs
}

// parseInterspersed parses fs from args with flags before, between or after the
// positional arguments, as kubectl takes them, and returns the positional ones.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos, args = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
}

// Kubeconfig connects as kubectl does: the kubeconfig's loading rules (--kubeconfig,
// $KUBECONFIG, ~/.kube/config) and --context.
func Kubeconfig(g Globals) (Clients, Exec, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = g.Kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: g.Context})
	rc, err := cc.ClientConfig()
	if err != nil {
		return Clients{}, nil, fmt.Errorf("kubeconfig: %w", err)
	}
	rc.UserAgent = "kubectl-fence"
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return Clients{}, nil, fmt.Errorf("kubernetes client: %w", err)
	}
	fencing, err := versioned.NewForConfig(rc)
	if err != nil {
		return Clients{}, nil, fmt.Errorf("fencing client: %w", err)
	}
	return Clients{Kube: kube, Fencing: fencing}, PodExec(rc, kube), nil
}

// release finds the session's release.
func (s *session) release(ctx context.Context) (Release, error) {
	return Find(ctx, s.clients.Kube, s.Namespace, s.Release, s.Lease)
}

func (s *session) printer() Printer {
	return Printer{Format: strings.ToLower(s.Output), Now: s.cli.Now(), Out: s.cli.Stdout}
}
