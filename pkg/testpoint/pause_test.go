//go:build kubefence_testpoints

package testpoint

import (
	"syscall"
	"testing"
	"time"
)

// TestEnvPausesWithTag: built with BuildTag, the child stops itself at the point Env names,
// before it passes it, and goes on once continued.
func TestEnvPausesWithTag(t *testing.T) {
	if !Enabled {
		t.Fatal("not Enabled with the build tag")
	}
	cmd, done := child(t, AfterCreate, AfterCreate)
	deadline := time.Now().Add(30 * time.Second)
	for !stopped(t, cmd.Process.Pid) {
		select {
		case <-done:
			t.Fatal("the child passed the point without stopping")
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the child did not stop within 30s")
		}
	}
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the child did not pass the point within 30s of SIGCONT")
	}
}
