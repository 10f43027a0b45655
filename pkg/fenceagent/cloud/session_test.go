package cloud

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kubefence/kubefence/pkg/plugin"
)

// scripted is an instance made of function fields; n counts calls of each method from 1.
type scripted struct {
	readFn          func(n int) (observation, error)
	stopFn, startFn func(n int) error
	reads, stops    int
	starts          int
}

// scriptedErr carries the classification the test wants.
type scriptedErr struct{ ae apiError }

func (e scriptedErr) Error() string { return e.ae.msg }

func (s *scripted) name() string     { return "scripted instance" }
func (s *scripted) stopVerb() string { return "stop" }
func (s *scripted) read(context.Context) (observation, error) {
	s.reads++
	return s.readFn(s.reads)
}
func (s *scripted) stop(context.Context) error {
	s.stops++
	if s.stopFn == nil {
		return nil
	}
	return s.stopFn(s.stops)
}
func (s *scripted) start(context.Context) error {
	s.starts++
	if s.startFn == nil {
		return nil
	}
	return s.startFn(s.starts)
}
func (s *scripted) classify(err error) apiError {
	var se scriptedErr
	if errors.As(err, &se) {
		return se.ae
	}
	return classifyTransport(err)
}

func newScriptedSession(inst *scripted) *session {
	return &session{
		p:       params{pollInterval: 5 * time.Millisecond, verifyTimeout: 2 * time.Second},
		inst:    inst,
		state:   plugin.StateUnknown,
		backoff: time.Millisecond,
	}
}

var (
	obsRunning  = ec2Observation("running")
	obsPending  = ec2Observation("pending")
	obsStopping = ec2Observation("stopping")
	obsStopped  = ec2Observation("stopped")
	obsGone     = ec2Observation("terminated")
	conflictErr = scriptedErr{apiError{kind: plugin.KindRetryable, conflict: true, msg: "IncorrectInstanceState"}}
	throttleErr = scriptedErr{apiError{kind: plugin.KindRetryable, retry: true, msg: "RequestLimitExceeded"}}
	notFoundErr = scriptedErr{apiError{kind: plugin.KindPermanent, msg: "InvalidInstanceID.NotFound"}}
)

// sequence reads each observation in turn and then the last one forever.
func sequence(obs ...observation) func(int) (observation, error) {
	return func(n int) (observation, error) { return obs[min(n, len(obs))-1], nil }
}

func TestEnsure(t *testing.T) {
	cases := map[string]struct {
		inst       scripted
		want       plugin.PowerState
		wantErr    plugin.ErrorKind // "" for success
		wantState  plugin.PowerState
		wantStops  int
		wantStarts int
		wantEvid   string
	}{
		// A pending instance refuses the stop; once it runs, the stop is sent again.
		"pending then running gets a second stop": {
			inst: scripted{
				readFn: sequence(obsPending, obsPending, obsRunning, obsStopping, obsStopped),
				stopFn: func(n int) error {
					if n == 1 {
						return conflictErr
					}
					return nil
				},
			},
			want: plugin.StateOff, wantState: plugin.StateOff, wantStops: 2, wantEvid: "refused in the current state",
		},
		"shutting down ends terminated": {
			inst: scripted{
				readFn: sequence(ec2Observation("shutting-down"), obsGone),
				stopFn: func(int) error { return conflictErr },
			},
			want: plugin.StateOff, wantState: plugin.StateOff, wantStops: 1, wantEvid: "off for good",
		},
		"throttled reads are retried": {
			inst: scripted{readFn: func(n int) (observation, error) {
				if n <= 2 {
					return observation{}, throttleErr
				}
				return obsStopped, nil
			}},
			want: plugin.StateOff, wantState: plugin.StateOff, wantEvid: "retrying",
		},
		"start of a terminated instance is permanent": {
			inst: scripted{readFn: sequence(obsGone)},
			want: plugin.StateOn, wantErr: plugin.KindPermanent, wantState: plugin.StateOff,
		},
		"instance vanishes while verifying": {
			inst: scripted{readFn: func(n int) (observation, error) {
				if n == 1 {
					return obsRunning, nil
				}
				return observation{}, notFoundErr
			}},
			// The last state read stands; a failed read proves nothing new.
			want: plugin.StateOff, wantErr: plugin.KindPermanent, wantState: plugin.StateOn, wantStops: 1,
		},
		"stop refused forever is no success": {
			inst: scripted{readFn: sequence(obsRunning), stopFn: func(int) error { return conflictErr }},
			want: plugin.StateOff, wantErr: plugin.KindRetryable, wantState: plugin.StateOn, wantStops: maxSends,
		},
		"start after stopped": {
			inst: scripted{readFn: sequence(obsStopped, obsPending, obsRunning)},
			want: plugin.StateOn, wantState: plugin.StateOn, wantStarts: 1, wantEvid: "verified on",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			inst := tc.inst
			s := newScriptedSession(&inst)
			if tc.wantErr == plugin.KindRetryable {
				s.p.verifyTimeout = 300 * time.Millisecond
			}
			err := s.Ensure(context.Background(), tc.want)
			res := s.Result(s.state)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("ensure %s: %v (evidence %q)", tc.want, err, res.Evidence)
			case tc.wantErr != "" && (err == nil || plugin.KindOf(err) != tc.wantErr):
				t.Fatalf("ensure %s = %v, want kind %s (evidence %q)", tc.want, err, tc.wantErr, res.Evidence)
			}
			if res.State != tc.wantState {
				t.Errorf("state %s, want %s", res.State, tc.wantState)
			}
			if inst.stops != tc.wantStops || inst.starts != tc.wantStarts {
				t.Errorf("stops %d starts %d, want %d and %d", inst.stops, inst.starts, tc.wantStops, tc.wantStarts)
			}
			if !strings.Contains(res.Evidence, tc.wantEvid) {
				t.Errorf("evidence %q lacks %q", res.Evidence, tc.wantEvid)
			}
		})
	}
}

func TestCallStopsAtMaxAttempts(t *testing.T) {
	inst := &scripted{readFn: func(int) (observation, error) { return observation{}, throttleErr }}
	s := newScriptedSession(inst)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := s.read(ctx)
	if plugin.KindOf(err) != plugin.KindRetryable || inst.reads != maxAttempts {
		t.Fatalf("read = %v after %d attempts, want retryable after %d", err, inst.reads, maxAttempts)
	}
}
