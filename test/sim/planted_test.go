package sim

import (
	"os"
	"testing"
)

// TestPlantedBugsStillApply: every planted bug's line is still in its file exactly once,
// so that make chaos PLANT=... and make chaos-realnode PLANT=... test what they say
// rather than failing to build (or, worse, planting nothing) after the code moved.
func TestPlantedBugsStillApply(t *testing.T) {
	t.Parallel()
	for name := range PlantedBugs {
		ov, err := PlantOverlay(t.TempDir(), name)
		if err != nil {
			t.Errorf("planted bug %s: %v", name, err)
			continue
		}
		if _, err := os.Stat(ov); err != nil {
			t.Errorf("planted bug %s: no overlay written: %v", name, err)
		}
	}
}
