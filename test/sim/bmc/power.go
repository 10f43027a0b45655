package bmc

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Actions the chassis script and SetPower log.
const (
	ActionOn         = "on"
	ActionOff        = "off"
	ActionReset      = "reset"
	ActionShutdown   = "shutdown"
	ActionIgnoredOff = "ignored-off"
	// ActionOffRequested: a slow BMC (OffDelay) accepted power off; ActionOff follows.
	ActionOffRequested = "off-requested"
	// ActionOffFailed: the OffHook failed; power stays on and the request fails.
	ActionOffFailed = "off-failed"
)

// PowerEvent is one line of the BMC's power log.
type PowerEvent struct {
	// Time is when the chassis script (or SetPower) handled the request.
	Time time.Time
	// Action is one of ActionOn, ActionOff, ActionReset, ActionShutdown, ActionIgnoredOff.
	Action string
	// Source is "bmc" for requests that came over IPMI and "sim" for SetPower.
	Source string
}

// PoweredOn reads the chassis power state from the file the chassis script keeps, so
// a test sees the BMC's own state rather than what a client reported.
func (s *IPMISim) PoweredOn() (bool, error) {
	return readPower(s.opts.Dir)
}

// SetPower changes power by the sim's own hand, like a person at the power button.
// It works even with IgnorePowerOff, which models broken BMC firmware, not a broken
// power supply. It is logged with source "sim".
func (s *IPMISim) SetPower(on bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := writePower(s.opts.Dir, on); err != nil {
		return err
	}
	action := ActionOff
	if on {
		action = ActionOn
	}
	now := time.Now()
	line := fmt.Sprintf("%d.%09d %s %s\n", now.Unix(), now.Nanosecond(), action, sourceSim)
	f, err := os.OpenFile(filepath.Join(s.opts.Dir, eventsFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("open power log: %w", err)
	}
	// One write per line: O_APPEND keeps it whole next to the script's own appends.
	if _, err := f.WriteString(line); err != nil {
		f.Close()
		return fmt.Errorf("write power log: %w", err)
	}
	return f.Close()
}

// Events returns the power log in the order it was written. A BMC that never had a
// power request has no log and no events.
func (s *IPMISim) Events() ([]PowerEvent, error) {
	b, err := os.ReadFile(filepath.Join(s.opts.Dir, eventsFile))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read power log: %w", err)
	}
	return parseEvents(b)
}

func parseEvents(b []byte) ([]PowerEvent, error) {
	var events []PowerEvent
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 3 {
			return nil, fmt.Errorf("power log line %d: want 3 fields, got %q", n, line)
		}
		t, err := parseUnixNano(fields[0])
		if err != nil {
			return nil, fmt.Errorf("power log line %d: %w", n, err)
		}
		events = append(events, PowerEvent{Time: t, Action: fields[1], Source: fields[2]})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read power log: %w", err)
	}
	return events, nil
}

// parseUnixNano parses `date +%s.%N` output, e.g. "1795308179.203675557".
func parseUnixNano(s string) (time.Time, error) {
	secStr, fracStr, _ := strings.Cut(s, ".")
	sec, err := strconv.ParseInt(secStr, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("timestamp %q: %w", s, err)
	}
	var nsec int64
	if fracStr != "" {
		if len(fracStr) > 9 {
			fracStr = fracStr[:9]
		}
		fracStr += strings.Repeat("0", 9-len(fracStr))
		if nsec, err = strconv.ParseInt(fracStr, 10, 64); err != nil {
			return time.Time{}, fmt.Errorf("timestamp %q: %w", s, err)
		}
	}
	return time.Unix(sec, nsec), nil
}

func readPower(dir string) (bool, error) {
	b, err := os.ReadFile(filepath.Join(dir, powerFile))
	if err != nil {
		return false, fmt.Errorf("read power state: %w", err)
	}
	switch v := strings.TrimSpace(string(b)); v {
	case "1":
		return true, nil
	case "0":
		return false, nil
	default:
		return false, fmt.Errorf("power state file holds %q, want 0 or 1", v)
	}
}

// writePower replaces the state file by rename, as the chassis script does, so readers
// never see it half written.
func writePower(dir string, on bool) error {
	v := "0\n"
	if on {
		v = "1\n"
	}
	path := filepath.Join(dir, powerFile)
	tmp := fmt.Sprintf("%s.tmp.go.%d", path, os.Getpid())
	if err := os.WriteFile(tmp, []byte(v), 0o600); err != nil {
		return fmt.Errorf("write power state: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write power state: %w", err)
	}
	return nil
}
