package ipmi_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/kubefence/kubefence/pkg/fenceagent/ipmi"
	"github.com/kubefence/kubefence/pkg/plugin"
	"github.com/kubefence/kubefence/test/sim/bmc"
	"github.com/kubefence/kubefence/test/sim/redfish"
)

// Run with: go test ./pkg/fenceagent/ipmi -run '^$' -bench . -benchtime 50x
//
// Every latency benchmark makes at least minCalls calls whatever b.N is, reports
// their p50 and p99, and overrides ns/op with their mean.

const (
	minCalls          = 50
	concurrentTargets = 50
	startParallelism  = 8
)

// benchTarget is one BMC a benchmark fences: its request and how to put its power
// back between calls.
type benchTarget struct {
	req      plugin.Request
	setPower func(on bool) error
}

func ipmiTarget(b *testing.B) benchTarget {
	s := startBMC(b, bmc.IPMIOptions{PoweredOn: true})
	return benchTarget{req: requestFor(s), setPower: s.SetPower}
}

func redfishTarget(b *testing.B) benchTarget {
	s := startRedfish(b, redfish.Options{})
	return benchTarget{req: redfishRequest(s), setPower: func(on bool) error { return s.SetPower("1", on) }}
}

func BenchmarkFenceLatency(b *testing.B) {
	targets := map[string]func(*testing.B) benchTarget{"ipmi_sim": ipmiTarget, "redfish": redfishTarget}
	actions := []struct {
		action  plugin.Action
		startOn bool
	}{{plugin.ActionOff, true}, {plugin.ActionOn, false}}
	for _, proto := range []string{"ipmi_sim", "redfish"} {
		for _, a := range actions {
			b.Run(proto+"/"+string(a.action), func(b *testing.B) {
				tgt := targets[proto](b)
				agent := ipmi.New()
				n := max(b.N, minCalls)
				samples := make([]time.Duration, 0, n)
				for range n {
					if err := tgt.setPower(a.startOn); err != nil {
						b.Fatal(err)
					}
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					start := time.Now()
					res, err := agent.Fence(ctx, tgt.req, a.action)
					samples = append(samples, time.Since(start))
					cancel()
					if err != nil {
						b.Fatalf("fence %s: %v", a.action, err)
					}
					if want := map[bool]plugin.PowerState{true: plugin.StateOff, false: plugin.StateOn}[a.startOn]; res.State != want {
						b.Fatalf("fence %s: state %s", a.action, res.State)
					}
				}
				reportLatency(b, samples)
			})
		}
	}
}

// BenchmarkFenceConcurrent fences concurrentTargets BMCs at once with one agent and
// reports the wall time of the whole batch.
func BenchmarkFenceConcurrent(b *testing.B) {
	b.Run("ipmi_sim", func(b *testing.B) {
		benchConcurrent(b, startManyIPMI(b, concurrentTargets))
	})
	b.Run("redfish", func(b *testing.B) {
		var tgts []benchTarget
		for range concurrentTargets {
			tgts = append(tgts, redfishTarget(b))
		}
		benchConcurrent(b, tgts)
	})
}

// startManyIPMI starts up to n ipmi_sim BMCs, a few at a time, and keeps those that
// start; how many did is reported, and fewer than half fails the benchmark.
func startManyIPMI(b *testing.B, n int) []benchTarget {
	var mu sync.Mutex
	var tgts []benchTarget
	var failed []error
	sem := make(chan struct{}, startParallelism)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			s, err := bmc.StartIPMI(ctx, bmc.IPMIOptions{Dir: b.TempDir(), PoweredOn: true, Password: testPassword})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed = append(failed, fmt.Errorf("bmc %d: %w", i, err))
				return
			}
			b.Cleanup(func() {
				if err := s.Stop(); err != nil {
					b.Errorf("stop bmc: %v", err)
				}
			})
			tgts = append(tgts, benchTarget{req: requestFor(s), setPower: s.SetPower})
		}()
	}
	wg.Wait()
	b.Logf("started %d of %d ipmi_sim BMCs in %s; failures: %v", len(tgts), n, time.Since(start).Round(time.Millisecond), failed)
	if len(tgts) < n/2 {
		b.Fatalf("only %d of %d ipmi_sim BMCs started", len(tgts), n)
	}
	return tgts
}

func benchConcurrent(b *testing.B, tgts []benchTarget) {
	agent := ipmi.New()
	// 50 ipmitool processes at once on a small machine need more than the 3s the
	// latency benchmarks allow per BMC call; a deployment sets these per agent.
	for _, t := range tgts {
		t.req.Params[ipmi.ParamTimeout] = "20s"
		t.req.Params[ipmi.ParamVerifyTimeout] = "30s"
	}
	var walls, each []time.Duration
	for range b.N {
		for _, t := range tgts {
			if err := t.setPower(true); err != nil {
				b.Fatal(err)
			}
		}
		lat := make([]time.Duration, len(tgts))
		errs := make([]error, len(tgts))
		var wg sync.WaitGroup
		start := time.Now()
		for i, t := range tgts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				t0 := time.Now()
				res, err := agent.Fence(ctx, t.req, plugin.ActionOff)
				lat[i] = time.Since(t0)
				if err == nil && res.State != plugin.StateOff {
					err = fmt.Errorf("state %s", res.State)
				}
				errs[i] = err
			}()
		}
		wg.Wait()
		walls = append(walls, time.Since(start))
		for i, err := range errs {
			if err != nil {
				b.Fatalf("target %d: %v", i, err)
			}
		}
		each = append(each, lat...)
	}
	reportLatency(b, each)
	sort.Slice(walls, func(i, j int) bool { return walls[i] < walls[j] })
	b.ReportMetric(float64(len(tgts)), "targets")
	b.ReportMetric(ms(walls[len(walls)/2]), "wall-ms")
}

// reportLatency reports p50, p99 and max in milliseconds and the mean as ns/op.
func reportLatency(b *testing.B, samples []time.Duration) {
	sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
	var sum time.Duration
	for _, s := range samples {
		sum += s
	}
	b.ReportMetric(float64(sum.Nanoseconds())/float64(len(samples)), "ns/op")
	b.ReportMetric(ms(percentile(samples, 50)), "p50-ms")
	b.ReportMetric(ms(percentile(samples, 99)), "p99-ms")
	b.ReportMetric(ms(samples[len(samples)-1]), "max-ms")
	b.ReportMetric(float64(len(samples)), "calls")
}

// percentile is the nearest-rank percentile of sorted samples.
func percentile(sorted []time.Duration, p int) time.Duration {
	rank := (p*len(sorted) + 99) / 100
	return sorted[max(rank, 1)-1]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
