package sim

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestJSONLogs: with --logging-format=json every line the controller writes,
// the agent host's included, is one JSON object with a message, and the leader's start
// and its serving address are among them.
func TestJSONLogs(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	h := fastHarness(t, ctx, nil)
	r := startLeader(t, ctx, h, "controller", "--logging-format=json")
	pollLog(t, ctx, r, `"msg":"Acting as leader"`)
	lines := strings.Split(strings.TrimSpace(r.Log()), "\n")
	seen := map[string]bool{}
	for i, line := range lines {
		var entry map[string]any
		if err := json.Unmarshal([]byte(line), &entry); err != nil {
			t.Fatalf("line %d is not a JSON object (%v): %q", i+1, err, line)
		}
		msg, _ := entry["msg"].(string)
		if msg == "" {
			t.Fatalf("line %d has no msg: %q", i+1, line)
		}
		seen[msg] = true
		if strings.Contains(msg, "agent launched") {
			seen["agent launched"] = true
		}
	}
	for _, want := range []string{"Acting as leader", "Serving metrics", "Serving health probes", "agent launched"} {
		if !seen[want] {
			t.Errorf("no %q entry among %d lines", want, len(lines))
		}
	}
	t.Logf("%d lines, each a JSON object", len(lines))
}
