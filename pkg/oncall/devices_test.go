package oncall

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestPrintDevicesSaysWhatIsNotThere: before its first round the leader says so; with
// no reads, why a round reads nothing; an error is kept on its row's one line.
func TestPrintDevicesSaysWhatIsNotThere(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	round := now.Add(-10 * time.Minute)
	for name, tc := range map[string]struct {
		d    Devices
		want []string
	}{
		"before the first round": {d: Devices{Leader: "pod-1_1_a"},
			want: []string{"answered:  by the leader pod-1_1_a; it has not ended a round of reads yet", "No device read"}},
		"a round with no device": {d: Devices{Leader: "pod-1_1_a", LastRound: &round},
			want: []string{"its last round of reads ended 10m ago (2026-11-29T11:50:00Z)", "No device read: no node's policy names"}},
		"an error over lines": {d: Devices{Leader: "pod-1_1_a", LastRound: &round, Reads: []DeviceRead{
			{Node: "node-1", Agent: "ipmi", State: "error", Identity: "not checked", Error: "node node-1:\n\tno target"}}},
			want: []string{"node-1  ipmi", "not checked  not reached", "node node-1: no target\n"}},
	} {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			if err := PrintDevices(&out, tc.d, now); err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("printed no %q:\n%s", w, out.String())
				}
			}
		})
	}
}
