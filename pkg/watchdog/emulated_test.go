package watchdog

import (
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func startEmulator(t *testing.T) (*Emulator, *atomic.Int32) {
	t.Helper()
	var expired atomic.Int32
	e := &Emulator{Path: filepath.Join(t.TempDir(), "wd.sock"), Expired: func() { expired.Add(1) }}
	if err := e.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e, &expired
}

// TestEmulatorExpires: an armed emulated watchdog that is fed keeps counting from each
// feed; once feeding stops it runs out, once.
func TestEmulatorExpires(t *testing.T) {
	e, expired := startEmulator(t)
	dev, err := Open("unix:" + e.Path)
	if err != nil {
		t.Fatal(err)
	}
	got, err := dev.Arm(2 * time.Second)
	if err != nil || got != 2*time.Second {
		t.Fatalf("Arm: %s, %v", got, err)
	}
	if armed, timeout := e.Armed(); !armed || timeout != 2*time.Second {
		t.Fatalf("emulator armed %t with %s", armed, timeout)
	}
	// Fed every 200ms for 3s, longer than the timeout: no expiry.
	tick := time.NewTicker(200 * time.Millisecond)
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); <-tick.C {
		if err := dev.Feed(); err != nil {
			t.Fatal(err)
		}
	}
	tick.Stop()
	if n := expired.Load(); n != 0 {
		t.Fatalf("expired %d times while fed", n)
	}
	until(t, "the expiry once feeding stopped", func() bool { return expired.Load() == 1 })
	if armed, _ := e.Armed(); armed || e.Expiries() != 1 {
		t.Errorf("after the expiry: armed %t, %d expiries", armed, e.Expiries())
	}
	if err := dev.Feed(); err == nil || !strings.Contains(err.Error(), "not armed") {
		t.Errorf("a feed after the expiry: %v, want the emulator's \"not armed\"", err)
	}
}

// TestEmulatorProcessDeath: an agent that dies without disarming (its connection closes)
// leaves the countdown running; one that disarms stops it.
func TestEmulatorProcessDeath(t *testing.T) {
	e, expired := startEmulator(t)
	s := &Socket{Path: e.Path}
	if _, err := s.Arm(time.Second); err != nil {
		t.Fatal(err)
	}
	if err := s.conn.Close(); err != nil {
		t.Fatal(err)
	}
	until(t, "the expiry after the agent died", func() bool { return expired.Load() == 1 })

	s = &Socket{Path: e.Path}
	if _, err := s.Arm(time.Second); err != nil {
		t.Fatal(err)
	}
	if err := s.Disarm(); err != nil {
		t.Fatal(err)
	}
	if armed, _ := e.Armed(); armed {
		t.Error("armed after a disarm: no countdown may run")
	}
}

// TestEmulatorRefusesNonsense: a bad command is answered with an error, which the
// device reports with the emulator's path.
func TestEmulatorRefusesNonsense(t *testing.T) {
	e, _ := startEmulator(t)
	s := &Socket{Path: e.Path}
	if err := s.Feed(); err == nil || !strings.Contains(err.Error(), "not armed") {
		t.Errorf("Feed before Arm: %v", err)
	}
	if _, err := s.Arm(500 * time.Millisecond); err == nil || !strings.Contains(err.Error(), "watchdog unix:"+e.Path+": watchdog timeout 500ms") {
		t.Errorf("Arm under a second: %v", err)
	}
	if _, err := (&Socket{Path: filepath.Join(t.TempDir(), "none.sock")}).Arm(time.Second); err == nil || !strings.Contains(err.Error(), "none.sock") {
		t.Errorf("Arm with no emulator: %v", err)
	}
}
