package cloud

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/kubefence/kubefence/pkg/plugin"
	"github.com/kubefence/kubefence/pkg/plugin/plugintest"
)

var badParams = map[string]map[string]string{
	"unknown parameter":  {"regoin": "us-east-1"},
	"secret in params":   {SecretSecretAccessKey: "x"},
	"endpoint not http":  {ParamEndpoint: "ftp://ec2.example"},
	"interface":          {ParamInterface: "private"},
	"lock not bool":      {ParamLock: "yes please"},
	"negative poll":      {ParamPollInterval: "-1s"},
	"poll over verify":   {ParamPollInterval: "10s", ParamVerifyTimeout: "1s"},
	"authURL no host":    {ParamAuthURL: "http://"},
	"refuseSelf garbage": {ParamRefuseSelf: "maybe"},
}

// The conformance kit against a real moto_server, state read back with the test's own client.
func TestConformanceAWS(t *testing.T) {
	url := moto(t)
	c := ec2Client(url, "us-east-1")
	plugintest.Run(t, plugintest.Kit{
		Agent: testAgent(),
		NewTarget: func(t *testing.T) plugintest.Target {
			id := runInstance(t, c)
			return plugintest.Target{
				Request: awsRequest(url, "us-east-1a", id),
				Observe: func() (plugin.PowerState, error) {
					return ec2Observation(observe(t, c, id)).power, nil
				},
			}
		},
		BadParams:   badParams,
		Secrets:     []string{testSecretAccessKey},
		Unfenceable: true,
	})
}

// The conformance kit against the Nova fake, with the lock option on.
func TestConformanceOpenStack(t *testing.T) {
	s := fakeServer{status: "ACTIVE", settleAfter: 2}
	f := newFakeNova(t, map[string]*fakeServer{srvID: &s})
	plugintest.Run(t, plugintest.Kit{
		Agent: testAgent(),
		NewTarget: func(t *testing.T) plugintest.Target {
			req := osRequest(f, srvID)
			req.Params[ParamLock] = "true"
			return plugintest.Target{
				Request: req,
				Observe: func() (plugin.PowerState, error) {
					got := f.server(srvID)
					if got.task != "" {
						return plugin.StateUnknown, nil
					}
					return novaObservation(got.status, "").power, nil
				},
			}
		},
		BadParams:   badParams,
		Secrets:     []string{osPassword},
		Unfenceable: true,
	})
}

// BenchmarkFenceMoto measures fence off, verified, against moto with default params
// (pollInterval 2s, of which the first read after the stop waits only firstPoll).
// Each iteration fences a fresh running instance; moto is reset outside the timer.
// Run with -benchtime=100x for p50/p99 over 100 calls.
func BenchmarkFenceMoto(b *testing.B) {
	url := moto(b)
	c := ec2Client(url, "us-east-1")
	a := testAgent()
	durations := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		if i%50 == 49 {
			moto(b)
		}
		id := runInstance(b, c)
		req := awsRequest(url, "us-east-1a", id)
		delete(req.Params, ParamPollInterval)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		b.StartTimer()
		start := time.Now()
		res, err := a.Fence(ctx, req, plugin.ActionOff)
		d := time.Since(start)
		b.StopTimer()
		cancel()
		if err != nil || res.State != plugin.StateOff {
			b.Fatalf("fence %d: %+v, %v", i, res, err)
		}
		if st := observe(b, c, id); st != types.InstanceStateNameStopped {
			b.Fatalf("fence %d: moto says %s", i, st)
		}
		durations = append(durations, d)
		b.StartTimer()
	}
	b.StopTimer()
	sort.Slice(durations, func(i, j int) bool { return durations[i] < durations[j] })
	b.ReportMetric(ms(percentile(durations, 50)), "p50-ms")
	b.ReportMetric(ms(percentile(durations, 99)), "p99-ms")
	b.ReportMetric(float64(len(durations)), "calls")
}

// percentile is the nearest-rank percentile of sorted durations.
func percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := (p*len(sorted) + 99) / 100
	return sorted[max(rank, 1)-1]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	for p, want := range map[int]time.Duration{50: 50 * time.Millisecond, 99: 99 * time.Millisecond, 100: 100 * time.Millisecond} {
		if got := percentile(ds, p); got != want {
			t.Errorf("p%d = %s, want %s", p, got, want)
		}
	}
	if got := fmt.Sprint(percentile(nil, 50)); got != "0s" {
		t.Errorf("p50 of nothing = %s", got)
	}
}
