package plugin

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
)

// agentName keeps names usable as file names and log keys, and rules out paths.
var agentName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// agentEnv is the whole environment of an agent process, besides what go-plugin
// adds for the handshake. Nothing is inherited from the controller, whose
// environment may hold cloud or API credentials.
var agentEnv = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}

// HostConfig configures a Host.
type HostConfig struct {
	// Dir is the plugin directory. Every agent binary must resolve inside it,
	// symlinks included.
	Dir string
	// Agents are the agents the host may launch, by name.
	Agents map[string]AgentSpec
	// Logger receives go-plugin's and the agents' own logs. Nil means Info level
	// on stderr. The host never logs request contents.
	Logger hclog.Logger
}

// AgentSpec says how to reach an agent: either a binary in the plugin directory
// that the host launches (SHA256 set), or a remote agent at a TCP address that
// the host dials with mutual TLS (Address set). Exactly one of the two.
type AgentSpec struct {
	// Binary is a file name inside HostConfig.Dir; empty means the agent's name.
	Binary string
	// SHA256 is the hex SHA-256 of the binary, checked before every launch.
	SHA256 string

	// Address is host:port of a remote agent (one started with "serve").
	Address string
	// CertFile and KeyFile are the PEM client certificate and key the host
	// presents to the remote agent.
	CertFile, KeyFile string
	// CAFile is the PEM CA bundle the remote agent's certificate must verify against.
	CAFile string
	// ServerName is the name the remote agent's certificate must carry; empty
	// means the host part of Address.
	ServerName string
}

// Validate returns every problem in c, each with its field path.
func (c HostConfig) Validate() error {
	var errs []error
	if c.Dir == "" {
		errs = append(errs, errors.New("dir: must be set"))
	}
	names := make([]string, 0, len(c.Agents))
	for name := range c.Agents {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		errs = append(errs, c.Agents[name].validate(name)...)
	}
	return errors.Join(errs...)
}

func (s AgentSpec) validate(name string) []error {
	var errs []error
	field := fmt.Sprintf("agents[%q]", name)
	if !agentName.MatchString(name) {
		errs = append(errs, fmt.Errorf("%s: invalid agent name %q: want %s", field, name, agentName))
	}
	if s.remote() {
		return append(errs, s.validateRemote(field)...)
	}
	if s.CertFile != "" || s.KeyFile != "" || s.CAFile != "" || s.ServerName != "" {
		errs = append(errs, fmt.Errorf("%s: certFile, keyFile, caFile and serverName apply only with address", field))
	}
	bin := s.binary(name)
	if bin != filepath.Base(bin) || bin == "." || bin == ".." {
		errs = append(errs, fmt.Errorf("%s.binary: %q must be a file name inside dir", field, bin))
	}
	if sum, err := hex.DecodeString(s.SHA256); err != nil || len(sum) != sha256.Size {
		errs = append(errs, fmt.Errorf("%s.sha256: must be %d hex digits", field, 2*sha256.Size))
	}
	return errs
}

func (s AgentSpec) binary(name string) string {
	if s.Binary == "" {
		return name
	}
	return s.Binary
}

// Host launches agent processes from a plugin directory and keeps one warm per
// agent name. It is safe for concurrent use.
type Host struct {
	dir    string // absolute, symlinks resolved
	specs  map[string]AgentSpec
	logger hclog.Logger

	mu     sync.Mutex
	closed bool
	slots  map[string]*slot
}

// slot holds the live process of one agent. Its lock serialises launches so that
// concurrent first calls start one process, not several; calls run unlocked.
type slot struct {
	mu   sync.Mutex
	proc *process
}

// process is one live agent: a launched process (client set) or a connection
// to a remote agent (conn set).
type process struct {
	client *goplugin.Client
	conn   *grpc.ClientConn
	agent  Agent
	// lifeline is the controller's end of a launched agent's lifeline (lifeline.go).
	lifeline *os.File
}

// exited reports whether the process is gone; a remote connection that has
// shut down counts as gone too.
func (p *process) exited() bool {
	if p.client != nil {
		return p.client.Exited()
	}
	return p.conn.GetState() == connectivity.Shutdown
}

// kill ends the process or closes the connection.
func (p *process) kill() {
	if p.client != nil {
		p.client.Kill()
		_ = p.lifeline.Close()
		return
	}
	_ = p.conn.Close()
}

// NewHost checks cfg and returns a Host. It launches nothing: each agent starts
// on its first call.
func NewHost(cfg HostConfig) (*Host, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("plugin host config: %w", err)
	}
	dir := cfg.Dir
	// Only local agents need the directory: a configuration of remote agents alone (or
	// of agents the controller carries out itself) may name one that is not there.
	if slices.ContainsFunc(slices.Collect(maps.Values(cfg.Agents)), func(s AgentSpec) bool { return s.Address == "" }) {
		var err error
		dir, err = filepath.Abs(cfg.Dir)
		if err == nil {
			dir, err = filepath.EvalSymlinks(dir)
		}
		if err != nil {
			return nil, fmt.Errorf("plugin dir %s: %w", cfg.Dir, err)
		}
	}
	logger := cfg.Logger
	if logger == nil {
		logger = hclog.New(&hclog.LoggerOptions{Name: "agents", Level: hclog.Info, Output: os.Stderr})
	}
	specs := make(map[string]AgentSpec, len(cfg.Agents))
	for name, spec := range cfg.Agents {
		specs[name] = spec
	}
	return &Host{dir: dir, specs: specs, logger: logger, slots: map[string]*slot{}}, nil
}

// Agent returns a handle on the named agent. The handle launches the process on
// first use, relaunches it when it has died, and reports a death during a call
// as an error wrapping ErrAgentDied.
func (h *Host) Agent(name string) (Agent, error) {
	if !agentName.MatchString(name) {
		return nil, fmt.Errorf("agent %q: invalid name: want %s", name, agentName)
	}
	if _, ok := h.specs[name]; !ok {
		return nil, fmt.Errorf("agent %q: not configured", name)
	}
	return &handle{host: h, name: name}, nil
}

// Close kills every agent process and makes later calls fail.
func (h *Host) Close() {
	h.mu.Lock()
	h.closed = true
	slots := make([]*slot, 0, len(h.slots))
	for _, s := range h.slots {
		slots = append(slots, s)
	}
	h.mu.Unlock()

	// Kill waits up to two seconds for a graceful exit; do all at once.
	var wg sync.WaitGroup
	for _, s := range slots {
		s.mu.Lock()
		p := s.proc
		s.proc = nil
		s.mu.Unlock()
		if p != nil {
			wg.Go(p.kill)
		}
	}
	wg.Wait()
}

func (h *Host) isClosed() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.closed
}

// acquire returns the live process of name, launching it if there is none or
// the last one exited.
func (h *Host) acquire(name string) (*process, error) {
	h.mu.Lock()
	s, ok := h.slots[name]
	if !ok {
		s = &slot{}
		h.slots[name] = s
	}
	h.mu.Unlock()

	s.mu.Lock()
	defer s.mu.Unlock()
	// Checked under the slot lock: Close takes it after setting closed, so a
	// launch either sees closed or finishes before Close kills what it started.
	if h.isClosed() {
		return nil, fmt.Errorf("agent %s: plugin host is closed", name)
	}
	if s.proc != nil && !s.proc.exited() {
		return s.proc, nil
	}
	if s.proc != nil {
		s.proc.kill()
		s.proc = nil
	}
	p, err := h.launch(name)
	if err != nil {
		return nil, err
	}
	s.proc = p
	return p, nil
}

// discard forgets p so the next call relaunches, unless another caller already
// replaced it, and kills it.
func (h *Host) discard(name string, p *process) {
	h.mu.Lock()
	s := h.slots[name]
	h.mu.Unlock()
	if s != nil {
		s.mu.Lock()
		if s.proc == p {
			s.proc = nil
		}
		s.mu.Unlock()
	}
	p.kill()
}

// binaryPath resolves the binary of name and refuses one that, through a
// symlink, lives outside the plugin directory.
func (h *Host) binaryPath(name string) (string, error) {
	path, err := filepath.EvalSymlinks(filepath.Join(h.dir, h.specs[name].binary(name)))
	if err != nil {
		return "", fmt.Errorf("agent %s: %w", name, &Error{Kind: KindPermanent, Message: err.Error()})
	}
	if !strings.HasPrefix(path, h.dir+string(filepath.Separator)) {
		return "", fmt.Errorf("agent %s: %w", name, &Error{Kind: KindPermanent,
			Message: fmt.Sprintf("binary resolves to %s, outside the plugin dir %s", path, h.dir)})
	}
	return path, nil
}

// launch starts one process for name and dispenses its client shim, or, for a
// remote agent, connects to it.
func (h *Host) launch(name string) (*process, error) {
	if h.specs[name].remote() {
		return h.dial(name)
	}
	path, err := h.binaryPath(name)
	if err != nil {
		return nil, err
	}
	sum, _ := hex.DecodeString(h.specs[name].SHA256) // checked by Validate
	cmd := exec.Command(path)
	cmd.Env = append([]string(nil), agentEnv...)
	cmd.Dir = h.dir
	dieWithParent(cmd)
	lifeline, agentEnd, err := attachLifeline(cmd)
	if err != nil {
		return nil, fmt.Errorf("agent %s: lifeline: %w", name, err)
	}
	// The agent's end is its own once it started (or failed to start).
	defer agentEnd.Close()
	logger := h.logger.Named(name)
	client := goplugin.NewClient(&goplugin.ClientConfig{
		HandshakeConfig:  Handshake,
		Plugins:          pluginSet(nil),
		Cmd:              cmd,
		SkipHostEnv:      true,
		SecureConfig:     &goplugin.SecureConfig{Checksum: sum, Hash: sha256.New()},
		AutoMTLS:         true,
		AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolGRPC},
		Logger:           logger,
	})
	rpc, err := client.Client()
	if err != nil {
		client.Kill()
		lifeline.Close()
		if errors.Is(err, goplugin.ErrChecksumsDoNotMatch) {
			return nil, fmt.Errorf("agent %s: %w", name, &Error{Kind: KindPermanent,
				Message: fmt.Sprintf("checksum mismatch for agent %s: %s does not hash to the configured sha256", name, path)})
		}
		return nil, fmt.Errorf("agent %s: launch %s: %w", name, path, err)
	}
	raw, err := rpc.Dispense(pluginName)
	if err != nil {
		client.Kill()
		lifeline.Close()
		return nil, fmt.Errorf("agent %s: dispense: %w", name, err)
	}
	agent, ok := raw.(Agent)
	if !ok {
		client.Kill()
		lifeline.Close()
		return nil, fmt.Errorf("agent %s: dispensed %T, not an agent", name, raw)
	}
	pid := 0
	if rc := client.ReattachConfig(); rc != nil {
		pid = rc.Pid
	}
	logger.Info("agent launched", "path", path, "pid", pid)
	return &process{client: client, agent: agent, lifeline: lifeline}, nil
}
