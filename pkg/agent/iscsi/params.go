package iscsi

import (
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

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

// validateParams checks non-secret params and returns every problem, each naming its parameter.
func validateParams(in map[string]string) error {
	_, err := parseParams(in)
	return err
}

func parseParams(in map[string]string) (params, error) {
	var p params
	var errs []error
	known := map[string]plugin.Param{}
	for _, s := range paramSpecs {
		known[s.Name] = s
	}
	for _, name := range sortedKeys(in) {
		if _, ok := known[name]; !ok {
			errs = append(errs, fmt.Errorf("%s: unknown parameter", name))
		}
	}
	get := func(name string) string {
		if v, ok := in[name]; ok {
			return strings.TrimSpace(v)
		}
		return known[name].Default
	}

	switch p.backend = get(ParamBackend); p.backend {
	case BackendTgt, BackendLIO:
	default:
		errs = append(errs, fmt.Errorf("%s: %q is not a backend; want %s or %s", ParamBackend, p.backend, BackendTgt, BackendLIO))
	}
	if v := get(ParamInitiatorAddress); v != "" {
		if p.initiator.Address = net.ParseIP(v); p.initiator.Address == nil {
			errs = append(errs, fmt.Errorf("%s: %q is not an IP address", ParamInitiatorAddress, v))
		} else if p.backend == BackendLIO {
			errs = append(errs, fmt.Errorf("%s: lio ACLs name initiators by IQN only; fence by the target IQN", ParamInitiatorAddress))
		}
	}
	for _, name := range strings.Split(get(ParamTargets), ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		if err := checkName(name); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", ParamTargets, err))
		}
		p.targets = append(p.targets, name)
	}
	port := get(ParamControlPort)
	var err error
	if p.controlPort, err = strconv.Atoi(port); err != nil || p.controlPort < 0 {
		errs = append(errs, fmt.Errorf("%s: %q is not a control port number", ParamControlPort, port))
	}
	if p.lld = get(ParamLLD); p.lld == "" || strings.HasPrefix(p.lld, "-") || strings.ContainsAny(p.lld, " \t") {
		errs = append(errs, fmt.Errorf("%s: %q is not a driver name", ParamLLD, p.lld))
	}
	if p.configfsRoot = get(ParamConfigfsRoot); p.backend == BackendLIO && !strings.HasPrefix(p.configfsRoot, "/") {
		errs = append(errs, fmt.Errorf("%s: %q is not an absolute path", ParamConfigfsRoot, p.configfsRoot))
	}
	for _, d := range []struct {
		name string
		dst  *time.Duration
	}{{ParamTimeout, &p.timeout}, {ParamVerifyTimeout, &p.verifyTimeout}, {ParamPollInterval, &p.pollInterval}} {
		v := get(d.name)
		parsed, err := time.ParseDuration(v)
		if err != nil || parsed <= 0 {
			errs = append(errs, fmt.Errorf("%s: %q is not a positive duration", d.name, v))
			continue
		}
		*d.dst = parsed
	}
	p.restore, p.hasRestore = in[ParamRestore]
	if p.hasRestore {
		if _, err := parseRemoved(p.restore); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", ParamRestore, err))
		}
	}
	if len(errs) > 0 {
		return params{}, plugin.Errorf(plugin.KindPermanent, "invalid parameters: %v", errors.Join(errs...))
	}
	return p, nil
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

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
