package plugin

import (
	"slices"
	"testing"
	"time"

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
	var lat []time.Duration
	for b.Loop() {
		start := time.Now()
		if _, err := a.Status(ctx, req); err != nil {
			b.Fatalf("status: %v", err)
		}
		lat = append(lat, time.Since(start))
	}
	reportPercentiles(b, lat)
}

// reportPercentiles adds p50 and p99 of the samples, in milliseconds, to the result.
func reportPercentiles(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}

// BenchmarkColdStart measures checksum, launch, handshake with mTLS and the first
// Describe: what a crashed agent costs before the controller can use it again.
func BenchmarkColdStart(b *testing.B) {
	ctx := b.Context()
	var lat []time.Duration
	for b.Loop() {
		start := time.Now()
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
		lat = append(lat, time.Since(start))
		b.StopTimer()
		h.Close()
		b.StartTimer()
	}
	reportPercentiles(b, lat)
}
