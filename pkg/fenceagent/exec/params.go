package exec

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/kubefence/kubefence/pkg/fenceagent/internal/agentkit"
	"github.com/kubefence/kubefence/pkg/plugin"
)

// Parameters the agent itself reads; every other param goes to the script.
const (
	ParamScript        = "script"
	ParamTargetKey     = "target_key"
	ParamVerifyTimeout = "verify_timeout"
	ParamPollInterval  = "poll_interval"
	ParamCheckMetadata = "check_metadata"
	SecretPassword     = "password"
)

// keyAction is the stdin key the agent writes itself; no param may set it.
const keyAction = "action"

// stdinKey is what a FenceAgentAPI stdin key may look like. It keeps a
// param from smuggling a second line, or another key, into the script's input.
var stdinKey = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,63}$`)

// paramSpecs is the single list of parameters: Describe publishes it, Validate checks it.
var paramSpecs = []plugin.Param{
	{Name: ParamScript, Type: plugin.ParamString, Required: true,
		Description: "absolute path of the fence_* script to run; it must exist and be executable"},
	{Name: ParamTargetKey, Type: plugin.ParamString, Default: "plug",
		Description: "stdin key that receives the request's target (plug, port, ip, ...); empty sends no target"},
	{Name: ParamVerifyTimeout, Type: plugin.ParamDuration, Default: "20s",
		Description: "how long to poll action=status for the requested state after a power command"},
	{Name: ParamPollInterval, Type: plugin.ParamDuration, Default: "500ms",
		Description: "pause between action=status runs while verifying"},
	{Name: ParamCheckMetadata, Type: plugin.ParamBool, Default: "true",
		Description: "check the script's params against its action=metadata answer when the configuration is loaded; the script then runs with action=metadata alone on stdin (no target, no credentials). Set false for a script that does not implement metadata"},
	{Name: SecretPassword, Type: plugin.ParamString, Secret: true,
		Description: "device password, written to the script's stdin; other secrets are passed on stdin as given"},
}

// params is what one call needs, parsed from a Request.
type params struct {
	script        string
	targetKey     string
	verifyTimeout time.Duration
	pollInterval  time.Duration
	checkMetadata bool
	// forward are the key=value pairs for the script besides action and target.
	forward map[string]string
	secrets map[string]string
}

// parseParams applies defaults and checks every param, naming each bad one.
func parseParams(in map[string]string) (params, error) {
	p := params{forward: map[string]string{}}
	r := agentkit.NewReader(paramSpecs, in)
	p.script = r.String(ParamScript)
	if err := checkScript(p.script); err != nil {
		r.Errorf(ParamScript, "%v", err)
	}
	p.targetKey = r.String(ParamTargetKey)
	if p.targetKey != "" && (!stdinKey.MatchString(p.targetKey) || p.targetKey == keyAction) {
		r.Errorf(ParamTargetKey, "%q is not a usable stdin key", p.targetKey)
	}
	p.verifyTimeout = r.PositiveDuration(ParamVerifyTimeout)
	p.pollInterval = r.PositiveDuration(ParamPollInterval)
	p.checkMetadata = r.Bool(ParamCheckMetadata)
	// Every param the agent does not read itself is the script's, passed on as given;
	// the target key must be known first, since no param may set it.
	r.CheckNames(func(key, value string) string {
		if why := checkPair(key, value, p.targetKey); why != "" {
			return why
		}
		p.forward[key] = value
		return ""
	})
	return agentkit.Parsed(r, p)
}

// parseRequest parses the params and checks the secrets and the target.
func parseRequest(req plugin.Request) (params, error) {
	p, err := parseParams(req.Params)
	if err != nil {
		return params{}, err
	}
	var errs []error
	for _, key := range slices.Sorted(maps.Keys(req.Secrets)) {
		if _, clash := p.forward[key]; clash {
			errs = append(errs, fmt.Errorf("secret %s: also set as a param", key))
			continue
		}
		// The value is never quoted back: it is a credential.
		if checkPair(key, req.Secrets[key], p.targetKey) != "" {
			errs = append(errs, fmt.Errorf("secret %s: invalid key or a line break in the value", key))
		}
	}
	if strings.ContainsAny(req.Target, "\r\n\x00") {
		errs = append(errs, fmt.Errorf("target %q: contains a line break", req.Target))
	}
	if len(errs) > 0 {
		return params{}, plugin.Errorf(plugin.KindPermanent, "invalid request: %v", errors.Join(errs...))
	}
	p.secrets = req.Secrets
	return p, nil
}

// checkPair refuses anything that would not be exactly one key=value line, saying why;
// "" accepts it.
func checkPair(key, value, targetKey string) string {
	switch {
	case !stdinKey.MatchString(key):
		return fmt.Sprintf("not a FenceAgentAPI key (want %s)", stdinKey)
	case key == keyAction:
		return "is set by the agent for each call"
	case key == targetKey:
		return "is the target key; the request's target fills it"
	case strings.ContainsAny(value, "\r\n\x00"):
		return "value contains a line break or NUL"
	}
	return ""
}

// checkScript accepts an absolute path to an executable regular file.
func checkScript(path string) error {
	if path == "" {
		return errors.New("must be set")
	}
	if !filepath.IsAbs(path) {
		return fmt.Errorf("%q is not an absolute path", path)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", path)
	}
	if fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not executable", path)
	}
	return nil
}
