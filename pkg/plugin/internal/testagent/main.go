// Command testagent is a fence agent for the plugin package's subprocess tests.
// It keeps each target's power state in a file under the "state_dir" parameter,
// so tests can see what it did without any channel besides the contract.
//
// Parameters: state_dir (required); block=true makes Fence write an "inflight"
// marker and wait for its deadline, so a test can kill the process mid-call.
// Secrets: password (required by Fence, Status and Unfence, never echoed).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/kubefence/kubefence/pkg/plugin"
)

func main() {
	logger := hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: os.Stderr, JSONFormat: true})
	plugin.Main(&agent{logger: logger})
}

type agent struct {
	logger hclog.Logger
}

func (a *agent) Describe(context.Context) (plugin.Description, error) {
	return plugin.Description{
		Name:    "testagent",
		Version: "0.1.0",
		Actions: []plugin.Action{plugin.ActionOff, plugin.ActionReboot},
		Params: []plugin.Param{
			{Name: "state_dir", Type: plugin.ParamString, Required: true, Description: "where power states live"},
			{Name: "block", Type: plugin.ParamBool, Default: "false", Description: "hang in Fence until the deadline"},
			{Name: "password", Type: plugin.ParamString, Secret: true, Required: true},
		},
	}, nil
}

func (a *agent) Validate(_ context.Context, params map[string]string) error {
	if params["state_dir"] == "" {
		return plugin.Errorf(plugin.KindPermanent, "state_dir: must be set")
	}
	return nil
}

func (a *agent) Fence(ctx context.Context, req plugin.Request, action plugin.Action) (plugin.Result, error) {
	path, err := a.statePath(req)
	if err != nil {
		return plugin.Result{}, err
	}
	a.logger.Info("fence", "target", req.Target, "action", action, "epoch", req.Epoch)
	if req.Params["block"] == "true" {
		marker := filepath.Join(req.Params["state_dir"], "inflight")
		if err := os.WriteFile(marker, []byte(fmt.Sprint(os.Getpid())), 0o600); err != nil {
			return plugin.Result{}, err
		}
		<-ctx.Done()
		return plugin.Result{}, ctx.Err()
	}
	var state plugin.PowerState
	switch action {
	case plugin.ActionOff:
		state = plugin.StateOff
	case plugin.ActionReboot, plugin.ActionOn:
		state = plugin.StateOn
	default:
		return plugin.Result{}, plugin.Errorf(plugin.KindUnsupported, "action %q", action)
	}
	if err := os.WriteFile(path, []byte(state), 0o600); err != nil {
		return plugin.Result{}, plugin.Errorf(plugin.KindTargetUnreachable, "write state: %v", err)
	}
	return plugin.Result{State: state, Evidence: fmt.Sprintf("%s set %s by pid %d", req.Target, state, os.Getpid())}, nil
}

func (a *agent) Status(_ context.Context, req plugin.Request) (plugin.Result, error) {
	path, err := a.statePath(req)
	if err != nil {
		return plugin.Result{}, err
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return plugin.Result{State: plugin.StateOn, Evidence: fmt.Sprintf("never fenced, read by pid %d", os.Getpid())}, nil
	}
	if err != nil {
		return plugin.Result{}, plugin.Errorf(plugin.KindTargetUnreachable, "read state: %v", err)
	}
	state := plugin.PowerState(strings.TrimSpace(string(b)))
	return plugin.Result{State: state, Evidence: fmt.Sprintf("read %s by pid %d", state, os.Getpid())}, nil
}

func (a *agent) Unfence(ctx context.Context, req plugin.Request) (plugin.Result, error) {
	return a.Fence(ctx, req, plugin.ActionOn)
}

// statePath checks the request the way a real agent checks credentials, and
// names the file that stands for the target's power.
func (a *agent) statePath(req plugin.Request) (string, error) {
	dir := req.Params["state_dir"]
	if dir == "" {
		return "", plugin.Errorf(plugin.KindPermanent, "state_dir: must be set")
	}
	if req.Secrets["password"] == "" {
		return "", plugin.Errorf(plugin.KindPermanent, "password: must be set")
	}
	if req.Target == "" || strings.ContainsAny(req.Target, `/\`) {
		return "", plugin.Errorf(plugin.KindPermanent, "target %q: want a plain name", req.Target)
	}
	return filepath.Join(dir, req.Target), nil
}
