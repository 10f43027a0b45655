package plugin

import (
	"testing"

	"github.com/hashicorp/go-hclog"
)

// BenchmarkStatusWarm measures one Status round trip to a running agent process:
// the per-call cost the controller pays once agents are warm.
func BenchmarkStatusWarm(b *testing.B) {
	_, a := newTestHost(b, nil)
	req := testRequest(b.TempDir())
	ctx := b.Context()
	if _, err := a.Status(ctx, req); err != nil {
		b.Fatalf("warm up: %v", err)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := a.Status(ctx, req); err != nil {
			b.Fatalf("status: %v", err)
		}
	}
}

// BenchmarkColdStart measures checksum, launch, handshake with mTLS and the first
// Describe: what a crashed agent costs before the controller can use it again.
func BenchmarkColdStart(b *testing.B) {
	ctx := b.Context()
	for b.Loop() {
		h, err := NewHost(HostConfig{
			Dir:    agentDir,
			Agents: map[string]AgentSpec{testAgent: {SHA256: agentSum}},
			Logger: hclog.NewNullLogger(),
		})
		if err != nil {
			b.Fatal(err)
		}
		a, err := h.Agent(testAgent)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := a.Describe(ctx); err != nil {
			b.Fatalf("describe: %v", err)
		}
		b.StopTimer()
		h.Close()
		b.StartTimer()
	}
}
