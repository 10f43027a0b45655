package plugin

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// usage is printed for bad command lines; go-plugin mode takes no arguments.
const usage = `usage:
  %[1]s                  run as a plugin of the kubefence controller (it launches the binary)
  %[1]s -version         print the agent name and version
  %[1]s serve --listen ADDR --cert FILE --key FILE --client-ca FILE
                         serve remote controllers over TCP with mutual TLS until SIGTERM
`

// Main is the whole main function of an agent binary: with no arguments it
// serves the controller that launched it (Serve); "serve" serves remote
// controllers over mutual TLS (ServeRemote) until SIGTERM or SIGINT;
// -version prints the agent's name and version. It exits on failure.
func Main(impl Agent) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := run(ctx, os.Args, impl, os.Stdout, os.Stderr)
	stop()
	if code != 0 {
		os.Exit(code)
	}
}

// run is Main without the process: args include the program name, and the
// serve mode ends when ctx does.
func run(ctx context.Context, args []string, impl Agent, stdout, stderr io.Writer) int {
	prog := "agent"
	if len(args) > 0 {
		prog, args = args[0], args[1:]
	}
	fs := flag.NewFlagSet(prog, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintf(stderr, usage, prog) }
	showVersion := fs.Bool("version", false, "print the agent name and version")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	switch {
	case *showVersion:
		return printVersion(ctx, impl, stdout, stderr)
	case fs.NArg() == 0:
		exitOnSIGTERM()
		watchLifeline(os.Exit)
		Serve(impl)
		return 0
	case fs.Arg(0) == "serve":
		return runServe(ctx, prog, fs.Args()[1:], impl, stderr)
	default:
		fmt.Fprintf(stderr, "%s: unknown command %q\n", prog, fs.Arg(0))
		fs.Usage()
		return 2
	}
}

func printVersion(ctx context.Context, impl Agent, stdout, stderr io.Writer) int {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	d, err := impl.Describe(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "describe: %v\n", err)
		return 1
	}
	fmt.Fprintln(stdout, d.Name, d.Version)
	return 0
}

// runServe parses the serve flags and serves until ctx ends.
func runServe(ctx context.Context, prog string, args []string, impl Agent, stderr io.Writer) int {
	fs := flag.NewFlagSet(prog+" serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "", "TCP address to serve on, host:port")
	cert := fs.String("cert", "", "PEM certificate of this agent")
	key := fs.String("key", "", "PEM private key of this agent")
	clientCA := fs.String("client-ca", "", "PEM CA bundle that signs the controllers' client certificates")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var missing []error
	for _, f := range []struct{ name, value string }{
		{"listen", *listen}, {"cert", *cert}, {"key", *key}, {"client-ca", *clientCA},
	} {
		if f.value == "" {
			missing = append(missing, fmt.Errorf("--%s: must be set", f.name))
		}
	}
	if fs.NArg() > 0 {
		missing = append(missing, fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	if err := errors.Join(missing...); err != nil {
		fmt.Fprintf(stderr, "%s serve: %v\n", prog, err)
		return 2
	}
	tlsCfg, err := LoadServerTLS(*cert, *key, *clientCA)
	if err != nil {
		fmt.Fprintf(stderr, "%s serve: %v\n", prog, err)
		return 1
	}
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintf(stderr, "%s serve: listen: %v\n", prog, err)
		return 1
	}
	// The address line is what an operator (or a test that asked for port 0)
	// reads to learn where the agent listens.
	fmt.Fprintf(stderr, "serving on %s with mutual TLS\n", lis.Addr())
	if err := serveListener(ctx, impl, lis, tlsCfg); err != nil {
		fmt.Fprintf(stderr, "%s serve: %v\n", prog, err)
		return 1
	}
	return 0
}

// exitOnSIGTERM ends a launched agent on SIGTERM: go-plugin's Serve never returns on it,
// and an agent must not outlive a controller that asked it to stop. A call in flight
// is cut; its reapers hear of the exit from the kernel and clear its processes.
func exitOnSIGTERM() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM)
	go func() {
		<-ch
		os.Exit(128 + int(syscall.SIGTERM))
	}()
}
