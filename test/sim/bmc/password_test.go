package bmc

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestSetPassword: a password set on the running BMC is the one it takes from then on,
// and the old one is refused, with no restart of ipmi_sim.
func TestSetPassword(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := StartIPMI(ctx, IPMIOptions{Dir: t.TempDir(), Password: "first-pw", PoweredOn: true})
	if err != nil {
		t.Fatalf("start ipmi sim: %v", err)
	}
	defer s.Stop()
	pid := s.PID()
	if err := s.SetPassword(ctx, "second-pw"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ipmitool(ctx, "power", "status"); err != nil {
		t.Errorf("the new password is refused: %v", err)
	}
	if err := writeConfigPassword(s, "first-pw"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ipmitool(ctx, "power", "status"); err == nil {
		t.Error("the old password is still taken")
	}
	if s.PID() != pid {
		t.Errorf("ipmi_sim restarted: pid %d, was %d", s.PID(), pid)
	}
}

// writeConfigPassword makes the test's own ipmitool send password.
func writeConfigPassword(s *IPMISim, password string) error {
	return os.WriteFile(filepath.Join(s.opts.Dir, passwordFile), []byte(password), 0o600)
}
