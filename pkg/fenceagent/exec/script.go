package exec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	osexec "os/exec"
	"slices"
	"strings"
	"sync"

	"github.com/kubefence/kubefence/pkg/fenceagent/internal/agentkit"
	"github.com/kubefence/kubefence/pkg/plugin"
	"github.com/kubefence/kubefence/pkg/plugin/reap"
)

// childEnv is the script's whole environment. Nothing is inherited: the agent's
// environment is none of the script's business, and secrets never go there.
var childEnv = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C"}

// outputLimit bounds what is kept of a script's output for errors and evidence.
const outputLimit = 4 << 10

// FenceAgentAPI exit codes of action=status.
const (
	exitOn  = 0
	exitOff = 2
)

// outcome is one run of the script.
type outcome struct {
	code int
	// output is the tail of stdout and stderr, secrets scrubbed.
	output string
}

// run runs the script once with action and everything else on stdin. An error
// means there is no exit code to read: the script could not start, was killed,
// or ctx ended.
func run(ctx context.Context, p params, action, target string) (outcome, error) {
	return runKeeping(ctx, p, action, target, outputLimit)
}

// runKeeping is run keeping the last limit bytes of the output.
func runKeeping(ctx context.Context, p params, action, target string, limit int) (outcome, error) {
	if err := ctx.Err(); err != nil {
		return outcome{}, fmt.Errorf("run %s action=%s: %w", p.script, action, err)
	}
	// Under a reaper: when the call returns, nothing the script started still runs, not
	// even a child that called setsid (safety invariant 7).
	cmd, err := reap.CommandContext(ctx, p.script)
	if err != nil {
		return outcome{}, plugin.Errorf(plugin.KindPermanent, "run %s action=%s: %v", p.script, action, err)
	}
	cmd.Env = childEnv
	cmd.Dir = "/"
	cmd.Stdin = strings.NewReader(stdin(p, action, target))
	out := &tailBuffer{limit: limit}
	cmd.Stdout, cmd.Stderr = out, out
	err = cmd.Run()
	o := outcome{output: agentkit.Scrub(strings.TrimSpace(out.String()), agentkit.Values(p.secrets)...)}
	if ctx.Err() != nil {
		return o, fmt.Errorf("run %s action=%s: %w", p.script, action, ctx.Err())
	}
	var exitErr *osexec.ExitError
	switch {
	case err == nil:
		return o, nil
	case errors.As(err, &exitErr) && exitErr.ExitCode() >= 0:
		o.code = exitErr.ExitCode()
		return o, nil
	case errors.As(err, &exitErr):
		return o, plugin.Errorf(plugin.KindRetryable, "run %s action=%s: %s: %s", p.script, action, exitErr, o.output)
	default:
		// Not startable (gone, not executable, bad interpreter): retrying will not help.
		return o, plugin.Errorf(plugin.KindPermanent, "run %s action=%s: %v", p.script, action, err)
	}
}

// stdin is the FenceAgentAPI input: one key=value per line, action first.
// Keys and values were checked by parseRequest, so every pair is one line.
func stdin(p params, action, target string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s=%s\n", keyAction, action)
	if p.targetKey != "" && target != "" {
		fmt.Fprintf(&b, "%s=%s\n", p.targetKey, target)
	}
	for _, k := range slices.Sorted(maps.Keys(p.forward)) {
		fmt.Fprintf(&b, "%s=%s\n", k, p.forward[k])
	}
	for _, k := range slices.Sorted(maps.Keys(p.secrets)) {
		fmt.Fprintf(&b, "%s=%s\n", k, p.secrets[k])
	}
	return b.String()
}

// tailBuffer keeps the last limit bytes written to it; the script's stdout and
// stderr write from two goroutines.
type tailBuffer struct {
	mu    sync.Mutex
	limit int
	buf   bytes.Buffer
}

func (t *tailBuffer) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf.Write(b)
	if over := t.buf.Len() - t.limit; over > 0 {
		t.buf.Next(over)
	}
	return len(b), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.buf.String()
}
