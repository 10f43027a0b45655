package tgt

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// AddTarget creates a target named iqn with LUN 1 backed by a sparse file of size
// bytes in the server's Dir, and returns its tid. The target has no ACL: it admits no
// one until a rule is bound.
func (s *Server) AddTarget(ctx context.Context, iqn string, size int64) (int, error) {
	if size <= 0 {
		return 0, fmt.Errorf("add target %s: size %d is not positive", iqn, size)
	}
	s.mu.Lock()
	tid := s.nextTID
	s.nextTID++
	s.mu.Unlock()
	backing := filepath.Join(s.dir, fmt.Sprintf("lun-%d.img", tid))
	f, err := os.Create(backing)
	if err != nil {
		return 0, fmt.Errorf("add target %s: %w", iqn, err)
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, fmt.Errorf("add target %s: backing file: %w", iqn, err)
	}
	id := strconv.Itoa(tid)
	if _, err := s.Tgtadm(ctx, "--op", "new", "--mode", "target", "--tid", id, "-T", iqn); err != nil {
		return 0, fmt.Errorf("add target %s: %w", iqn, err)
	}
	s.mu.Lock()
	s.tids = append(s.tids, tid)
	s.mu.Unlock()
	if _, err := s.Tgtadm(ctx, "--op", "new", "--mode", "logicalunit", "--tid", id, "--lun", "1", "-b", backing); err != nil {
		return 0, fmt.Errorf("add target %s: lun 1: %w", iqn, err)
	}
	return tid, nil
}

// BindIQN admits the initiator named iqn to target tid.
func (s *Server) BindIQN(ctx context.Context, tid int, iqn string) error {
	return s.rule(ctx, "bind", tid, "-Q", iqn)
}

// BindAddress admits initiators from addr (an IP address, or ALL) to target tid.
func (s *Server) BindAddress(ctx context.Context, tid int, addr string) error {
	return s.rule(ctx, "bind", tid, "-I", addr)
}

// UnbindAddress removes the address rule addr from target tid.
func (s *Server) UnbindAddress(ctx context.Context, tid int, addr string) error {
	return s.rule(ctx, "unbind", tid, "-I", addr)
}

func (s *Server) rule(ctx context.Context, op string, tid int, flag, value string) error {
	if _, err := s.Tgtadm(ctx, "--op", op, "--mode", "target", "--tid", strconv.Itoa(tid), flag, value); err != nil {
		return fmt.Errorf("%s %s %s on tid %d: %w", op, flag, value, tid, err)
	}
	return nil
}

// ACL returns the rules tgtd reports for target tid, as listed under "ACL information".
func (s *Server) ACL(ctx context.Context, tid int) ([]string, error) {
	sec, err := s.section(ctx, tid, "ACL information:")
	if err != nil {
		return nil, err
	}
	return sec, nil
}

// Initiators returns the initiator names with an I_T nexus (a live session) on target tid.
func (s *Server) Initiators(ctx context.Context, tid int) ([]string, error) {
	sec, err := s.section(ctx, tid, "I_T nexus information:")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range sec {
		if name, ok := strings.CutPrefix(line, "Initiator:"); ok {
			if f := strings.Fields(name); len(f) > 0 {
				out = append(out, f[0])
			}
		}
	}
	return out, nil
}

// section returns the trimmed lines of one section of target tid in `--op show --mode
// target`. The harness reads tgtd with its own small reader so that tests of the agent's
// parser do not check that parser against itself.
func (s *Server) section(ctx context.Context, tid int, header string) ([]string, error) {
	out, err := s.Tgtadm(ctx, "--op", "show", "--mode", "target")
	if err != nil {
		return nil, err
	}
	prefix := fmt.Sprintf("Target %d:", tid)
	var inTarget, inSection bool
	var lines []string
	for _, raw := range strings.Split(out, "\n") {
		line := strings.TrimSpace(raw)
		switch {
		case strings.HasPrefix(raw, "Target "):
			inTarget, inSection = strings.HasPrefix(raw, prefix), false
		case !inTarget || line == "":
		case strings.HasPrefix(raw, "    ") && !strings.HasPrefix(raw, "     "):
			inSection = line == header
		case inSection:
			lines = append(lines, line)
		}
	}
	return lines, nil
}
