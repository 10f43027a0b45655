package iscsi

import (
	"fmt"
	"math"
	"net"
	"strings"
	"time"

	"github.com/kubefence/kubefence/pkg/fenceagent/internal/agentkit"
	"github.com/kubefence/kubefence/pkg/plugin"
)

// Parameter names, as Describe announces them.
const (
	ParamBackend          = "backend"
	ParamInitiatorAddress = "initiatorAddress"
	ParamTargets          = "targets"
	ParamControlPort      = "controlPort"
	ParamLLD              = "lld"
	ParamConfigfsRoot     = "configfsRoot"
	ParamTimeout          = "timeout"
	ParamVerifyTimeout    = "verifyTimeout"
	ParamPollInterval     = "pollInterval"
	ParamRestore          = "restore"
)

// Backend names for ParamBackend.
const (
	BackendTgt = "tgt"
	BackendLIO = "lio"
)

// params is what the driver needs for one call, parsed from a Request.
type params struct {
	backend      string
	initiator    Initiator
	targets      []string // empty: every target
	controlPort  int
	lld          string
	configfsRoot string
	// timeout bounds each backend command.
	timeout       time.Duration
	verifyTimeout time.Duration
	pollInterval  time.Duration
	// restore is the evidence of earlier Fence calls; hasRestore tells absent from empty.
	restore    string
	hasRestore bool
}

// paramSpecs is the single list of parameters: Describe publishes it, Validate checks it.
var paramSpecs = []plugin.Param{
	{Name: ParamBackend, Type: plugin.ParamString, Default: BackendTgt,
		Description: "storage server kind: tgt (drives tgtadm) or lio (writes the configfs tree)"},
	{Name: ParamInitiatorAddress, Type: plugin.ParamString,
		Description: "the node's source IP address as the storage server sees it; address ACL rules and connections from it are the node's (tgt only)"},
	{Name: ParamTargets, Type: plugin.ParamString,
		Description: "comma-separated IQNs of the targets to protect; empty protects every target"},
	{Name: ParamControlPort, Type: plugin.ParamInt, Default: "0",
		Description: "tgt: the control port N of `tgtd -C N` (tgtadm -C N)"},
	{Name: ParamLLD, Type: plugin.ParamString, Default: "iscsi",
		Description: "tgt: the low-level driver of the targets (tgtadm --lld)"},
	{Name: ParamConfigfsRoot, Type: plugin.ParamString, Default: "/sys/kernel/config/target",
		Description: "lio: the target configfs directory holding iscsi/<target-iqn>/tpgt_N"},
	{Name: ParamTimeout, Type: plugin.ParamDuration, Default: "5s",
		Description: "time limit of each command to the storage server"},
	{Name: ParamVerifyTimeout, Type: plugin.ParamDuration, Default: "10s",
		Description: "how long to read ACLs and sessions back until the requested state shows; not reaching it fails the call"},
	{Name: ParamPollInterval, Type: plugin.ParamDuration, Default: "100ms",
		Description: "pause between reads while verifying"},
	{Name: ParamRestore, Type: plugin.ParamString,
		Description: "Unfence: the evidence of the Fence call(s) to undo; its \"removed:\" lines say exactly which rules to restore. Absent: bind the initiator IQN to every protected target that does not admit it"},
}

// parseParams applies defaults and parses the params, returning every problem as one
// permanent error that names each bad parameter.
func parseParams(in map[string]string) (params, error) {
	var p params
	r := agentkit.NewReader(paramSpecs, in)
	r.CheckNames(nil)
	switch p.backend = r.String(ParamBackend); p.backend {
	case BackendTgt, BackendLIO:
	default:
		r.Errorf(ParamBackend, "%q is not a backend; want %s or %s", p.backend, BackendTgt, BackendLIO)
	}
	if v := r.String(ParamInitiatorAddress); v != "" {
		if p.initiator.Address = net.ParseIP(v); p.initiator.Address == nil {
			r.Errorf(ParamInitiatorAddress, "%q is not an IP address", v)
		} else if p.backend == BackendLIO {
			r.Errorf(ParamInitiatorAddress, "lio ACLs name initiators by IQN only; fence by the target IQN")
		}
	}
	for _, name := range strings.Split(r.String(ParamTargets), ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		if err := checkName(name); err != nil {
			r.Errorf(ParamTargets, "%v", err)
		}
		p.targets = append(p.targets, name)
	}
	p.controlPort = r.Int(ParamControlPort, 0, math.MaxInt, "a control port number")
	if p.lld = r.String(ParamLLD); p.lld == "" || strings.HasPrefix(p.lld, "-") || strings.ContainsAny(p.lld, " \t") {
		r.Errorf(ParamLLD, "%q is not a driver name", p.lld)
	}
	if p.configfsRoot = r.String(ParamConfigfsRoot); p.backend == BackendLIO && !strings.HasPrefix(p.configfsRoot, "/") {
		r.Errorf(ParamConfigfsRoot, "%q is not an absolute path", p.configfsRoot)
	}
	p.timeout = r.PositiveDuration(ParamTimeout)
	p.verifyTimeout = r.PositiveDuration(ParamVerifyTimeout)
	p.pollInterval = r.PositiveDuration(ParamPollInterval)
	p.restore, p.hasRestore = in[ParamRestore]
	if p.hasRestore {
		if _, err := parseRemoved(p.restore); err != nil {
			r.Errorf(ParamRestore, "%v", err)
		}
	}
	return agentkit.Parsed(r, p)
}

// parseRequest parses params and the target, the initiator's IQN. A bad request does
// not get better by retrying, so every failure is permanent.
func parseRequest(req plugin.Request) (params, error) {
	p, err := parseParams(req.Params)
	if err != nil {
		return params{}, err
	}
	if t := strings.TrimSpace(req.Target); t != "" {
		if err := checkName(t); err != nil {
			return params{}, plugin.Errorf(plugin.KindPermanent, "target: %v", err)
		}
		p.initiator.IQN = t
	}
	if p.initiator.IQN == "" && p.initiator.Address == nil {
		return params{}, plugin.Errorf(plugin.KindPermanent,
			"target: empty and no %s; want the node's initiator IQN, its address, or both", ParamInitiatorAddress)
	}
	return p, nil
}

// checkName accepts an iSCSI name (iqn., eui. or naa. form) that is safe in a tgtadm
// argument list, a configfs path and an evidence record.
func checkName(name string) error {
	lower := strings.ToLower(name)
	if !strings.HasPrefix(lower, "iqn.") && !strings.HasPrefix(lower, "eui.") && !strings.HasPrefix(lower, "naa.") {
		return fmt.Errorf("%q is not an iSCSI name (iqn., eui. or naa.)", name)
	}
	if strings.ContainsAny(name, " \t\n;=/,") {
		return fmt.Errorf("%q contains a space, ';', '=', '/' or ','", name)
	}
	return nil
}
