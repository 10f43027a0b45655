package ipmi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/kubefence/kubefence/pkg/plugin"
)

// PowerClient is a connection to one BMC. The method set is bmclib's (*bmclib.Client):
// NewRedfishClient wraps bmclib's redfish provider, which keeps credentials safe;
// NewIpmitoolClient runs ipmitool itself, because bmclib's ipmitool provider does not.
type PowerClient interface {
	Open(ctx context.Context) error
	Close(ctx context.Context) error
	// GetPowerState returns the BMC's raw answer, e.g. "Chassis Power is on" (IPMI)
	// or "PoweringOff" (Redfish).
	GetPowerState(ctx context.Context) (string, error)
	// SetPowerState sends "on", "off", "reset" or "cycle".
	SetPowerState(ctx context.Context, state string) (bool, error)
}

// Conn is what a ClientFunc needs to reach a BMC.
type Conn struct {
	Host        string
	Port        int
	CipherSuite string
	// Privilege is the IPMI session privilege level ipmitool asks for (-L).
	Privilege string
	Username  string
	Password  string
	// Timeout bounds each call to the BMC.
	Timeout time.Duration
	// CABundle holds PEM CA certificates that verify a Redfish BMC; empty means the
	// system roots. Redfish only, like Insecure and SystemName.
	CABundle string
	// Insecure skips Redfish certificate verification.
	Insecure bool
	// SystemName picks the Redfish ComputerSystem by Name when there are several.
	SystemName string
}

// ClientFunc makes the client for one call; tests inject fakes with it.
type ClientFunc func(c Conn) (PowerClient, error)

// NewIpmitoolClient is the default ClientFunc. It runs ipmitool itself rather than
// through bmclib v2.3.5, whose ipmitool provider hands the password over in the
// IPMITOOL_PASSWORD environment variable (readable in /proc/PID/environ): here the
// password goes into a 0600 temporary file passed with -f and removed on Close.
// The user name has no such option in ipmitool and is on its command line.
func NewIpmitoolClient(c Conn) (PowerClient, error) {
	path, err := lookIpmitool()
	if err != nil {
		return nil, err
	}
	return &ipmitoolClient{conn: c, path: path}, nil
}

// lookIpmitool finds ipmitool in PATH. Its error is permanent (installing a binary is
// not something a retry does) and says what the agent needs and how to get it.
func lookIpmitool() (string, error) {
	path, err := exec.LookPath("ipmitool")
	if err != nil {
		return "", plugin.Errorf(plugin.KindPermanent,
			"agent %q: provider %s needs the ipmitool binary, not found in PATH (%s): "+
				"use the kubefence image, which carries it, or install ipmitool (e.g. apt-get install ipmitool); "+
				"a BMC that speaks Redfish can use %s=%s instead",
			Name, ProviderIPMI, os.Getenv("PATH"), ParamProtocol, ProviderRedfish)
	}
	return path, nil
}

type ipmitoolClient struct {
	conn     Conn
	path     string
	passFile string
}

// Open writes the password file. It does not contact the BMC: ipmitool opens a
// session per command.
func (c *ipmitoolClient) Open(ctx context.Context) error {
	f, err := os.CreateTemp("", "kubefence-ipmi-*") // CreateTemp makes it 0600
	if err != nil {
		return fmt.Errorf("create secret file: %w", err)
	}
	c.passFile = f.Name()
	if _, err := f.WriteString(c.conn.Password); err != nil {
		f.Close()
		_ = c.Close(ctx)
		return fmt.Errorf("write secret file: %w", err)
	}
	if err := f.Close(); err != nil {
		_ = c.Close(ctx)
		return fmt.Errorf("write secret file: %w", err)
	}
	return nil
}

// Close removes the password file.
func (c *ipmitoolClient) Close(context.Context) error {
	if c.passFile == "" {
		return nil
	}
	err := os.Remove(c.passFile)
	c.passFile = ""
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove secret file: %w", err)
	}
	return nil
}

func (c *ipmitoolClient) GetPowerState(ctx context.Context) (string, error) {
	return c.run(ctx, "chassis", "power", "status")
}

func (c *ipmitoolClient) SetPowerState(ctx context.Context, state string) (bool, error) {
	want := map[string]string{"on": "Up/On", "off": "Down/Off", "reset": "Reset", "cycle": "Cycle"}[state]
	if want == "" {
		return false, fmt.Errorf("unsupported power state %q", state)
	}
	out, err := c.run(ctx, "chassis", "power", state)
	if err != nil {
		return false, err
	}
	if !strings.Contains(out, "Chassis Power Control: "+want) {
		return false, fmt.Errorf("unexpected answer to power %s: %q", state, strings.TrimSpace(out))
	}
	return true, nil
}

// run returns ipmitool's stdout. On failure the error carries its stderr, where -v
// puts the lines that tell a rejected password ("RAKP 2 HMAC is invalid") from a BMC
// that does not answer ("Get Auth Capabilities error"); without -v both read
// "Unable to establish IPMI v2 / RMCP+ session".
func (c *ipmitoolClient) run(ctx context.Context, command ...string) (string, error) {
	if c.passFile == "" {
		return "", errors.New("client not open")
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, c.conn.Timeout)
	defer cancel()
	args := []string{"-v", "-I", "lanplus", "-C", c.conn.CipherSuite, "-L", c.conn.Privilege,
		"-H", c.conn.Host, "-p", strconv.Itoa(c.conn.Port),
		"-U", c.conn.Username, "-f", c.passFile,
		// One retry of one second: the per-call timeout and the verify loop do the
		// waiting, and ipmitool's default retries would outlast the timeout.
		"-N", "1", "-R", "1"}
	cmd := exec.CommandContext(ctx, c.path, append(args, command...)...)
	// Nothing of the agent's environment reaches ipmitool; LC_ALL keeps its text parseable.
	cmd.Env = []string{"LC_ALL=C"}
	cmd.WaitDelay = time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		why := fmt.Sprintf("no answer within the per-call timeout of %s", c.conn.Timeout)
		if parent.Err() != nil {
			why = "the call's deadline ended first"
		}
		return stdout.String(), fmt.Errorf("ipmitool %s: %s: %w", strings.Join(command, " "), why, ctx.Err())
	}
	if err != nil {
		return stdout.String(), &toolError{
			command: strings.Join(command, " "),
			err:     err,
			output:  strings.TrimSpace(stdout.String() + "\n" + stderr.String()),
		}
	}
	return stdout.String(), nil
}

// toolError is a failed ipmitool run with its output, which classify reads.
type toolError struct {
	command string
	err     error
	output  string
}

func (e *toolError) Error() string {
	return fmt.Sprintf("ipmitool %s: %v: %s", e.command, e.err, oneLine(e.output))
}

func (e *toolError) Unwrap() error { return e.err }

// oneLine drops ipmitool's banner noise and joins the rest for a log-friendly message.
func oneLine(s string) string {
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "Loading IANA PEN Registry") {
			continue
		}
		lines = append(lines, l)
	}
	return strings.Join(lines, "; ")
}
