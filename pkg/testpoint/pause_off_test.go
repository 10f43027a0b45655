//go:build !kubefence_testpoints

package testpoint

import "testing"

// TestEnvIgnoredWithoutTag: a binary built without BuildTag (the release's build) goes
// through the point Env names without stopping.
func TestEnvIgnoredWithoutTag(t *testing.T) {
	if Enabled {
		t.Fatal("Enabled without the build tag")
	}
	cmd, done := child(t, AfterCreate, AfterCreate)
	passesWithoutStop(t, cmd, done)
}
