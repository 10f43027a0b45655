package app

import (
	"strings"
	"testing"
)

// TestUsageNamesEverySubcommand: `fence-controller -h` lists every subcommand main runs.
func TestUsageNamesEverySubcommand(t *testing.T) {
	for _, name := range append([]string{"--validate-config"}, Subcommands...) {
		if !strings.Contains(Usage, "fence-controller "+name+" ") {
			t.Errorf("usage names no %q:\n%s", name, Usage)
		}
	}
}
