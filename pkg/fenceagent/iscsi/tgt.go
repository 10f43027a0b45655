package iscsi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Tgt drives a Linux tgt daemon through tgtadm. Every command is an argument list, never
// a shell line.
type Tgt struct {
	// Bin is the tgtadm executable; "tgtadm" (found on PATH) when empty.
	Bin string
	// ControlPort is N of `tgtd -C N`.
	ControlPort int
	// LLD is the low-level driver, normally "iscsi".
	LLD string
	// Timeout bounds each tgtadm call.
	Timeout time.Duration
}

var _ Backend = (*Tgt)(nil)

// Phrases of tgtadm that mean the daemon did not answer (tgtadm exits 107 then).
var tgtUnreachable = []string{"transport endpoint is not connected", "can't send the request", "failed to send request",
	"connection refused", "no such file or directory"}

// Targets runs `tgtadm --op show --mode target` and parses every target with its ACL
// and I_T nexuses.
func (b *Tgt) Targets(ctx context.Context) ([]Target, error) {
	out, err := b.run(ctx, "--op", "show", "--mode", "target")
	if err != nil {
		return nil, err
	}
	return parseTgtShow(out)
}

// Bind adds an IQN rule (-Q) or an address rule (-I) to t.
func (b *Tgt) Bind(ctx context.Context, t Target, r Rule) error {
	_, err := b.run(ctx, "--op", "bind", "--mode", "target", "--tid", t.ID, ruleFlag(r), r.Value)
	return err
}

// Unbind removes one rule from t; a rule that is not there is ErrNotFound.
func (b *Tgt) Unbind(ctx context.Context, t Target, r Rule) error {
	_, err := b.run(ctx, "--op", "unbind", "--mode", "target", "--tid", t.ID, ruleFlag(r), r.Value)
	return err
}

// CloseConnection deletes one connection, which ends its session; one that is gone is
// ErrNotFound.
func (b *Tgt) CloseConnection(ctx context.Context, t Target, c Connection) error {
	_, err := b.run(ctx, "--op", "delete", "--mode", "conn", "--tid", t.ID, "--sid", c.Session, "--cid", c.ID)
	return err
}

func ruleFlag(r Rule) string {
	if r.Kind == RuleIQN {
		return "-Q"
	}
	return "-I"
}

func (b *Tgt) run(ctx context.Context, args ...string) (string, error) {
	bin := b.Bin
	if bin == "" {
		bin = "tgtadm"
	}
	if b.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, b.Timeout)
		defer cancel()
	}
	full := append([]string{"-C", strconv.Itoa(b.ControlPort), "--lld", b.LLD}, args...)
	cmd := exec.CommandContext(ctx, bin, full...)
	cmd.WaitDelay = time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err == nil {
		return stdout.String(), nil
	}
	msg := strings.TrimSpace(stderr.String() + " " + stdout.String())
	what := fmt.Sprintf("tgtadm %s", strings.Join(args, " "))
	var ee *exec.ExitError
	switch {
	case errors.Is(err, exec.ErrNotFound):
		return "", fmt.Errorf("%s: %w: %v (apt-get install tgt)", what, ErrBackendBroken, err)
	case ctx.Err() != nil:
		return "", fmt.Errorf("%s: control port %d: %w", what, b.ControlPort, ctx.Err())
	case containsAny(strings.ToLower(msg), tgtUnreachable):
		return "", fmt.Errorf("%s: tgtd on control port %d: %w: %s", what, b.ControlPort, ErrUnreachable, msg)
	case errors.As(err, &ee) && ee.ExitCode() == 22 && strings.Contains(msg, "does not exist"),
		strings.Contains(msg, "can't find the session"), strings.Contains(msg, "can't find the connection"):
		return "", fmt.Errorf("%s: %w: %s", what, ErrNotFound, msg)
	default:
		return "", fmt.Errorf("%s: %w: %s", what, err, msg)
	}
}

func containsAny(s string, phrases []string) bool {
	for _, ph := range phrases {
		if strings.Contains(s, ph) {
			return true
		}
	}
	return false
}
