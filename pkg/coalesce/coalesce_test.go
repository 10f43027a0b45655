package coalesce

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestCallersShareTheNextRead: callers that ask while a read is under way do not get
// its answer (it was sent before they asked); they share the one read sent after it.
func TestCallersShareTheNextRead(t *testing.T) {
	release := make(chan struct{})
	var sent atomic.Int32
	r := &Read[int32]{Timeout: time.Minute, Do: func(context.Context) (int32, error) {
		n := sent.Add(1)
		if n == 1 {
			<-release
		}
		return n, nil
	}}
	first := make(chan int32)
	go func() {
		res, _ := r.Get(context.Background())
		first <- res.Value
	}()
	deadline := time.Now().Add(time.Minute)
	for sent.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the first read was never sent")
		}
		time.Sleep(time.Millisecond)
	}
	const late = 20
	got := make([]int32, late)
	var wg sync.WaitGroup
	for i := range late {
		wg.Go(func() {
			res, err := r.Get(context.Background())
			if err != nil {
				t.Error(err)
			}
			got[i] = res.Value
		})
	}
	for r.Waiting() < late {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d callers wait for the next read", r.Waiting(), late)
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	if v := <-first; v != 1 {
		t.Errorf("first caller got read %d, want 1", v)
	}
	wg.Wait()
	for i, v := range got {
		if v != 2 {
			t.Errorf("late caller %d got read %d, want 2 (sent after it asked, shared)", i, v)
		}
	}
	if n := sent.Load(); n != 2 {
		t.Errorf("%d reads for %d callers, want 2", n, 1+late)
	}
}

// TestCallerContext: a caller whose context ends stops waiting; the read goes on for
// the others under its own timeout.
func TestCallerContext(t *testing.T) {
	release := make(chan struct{})
	r := &Read[int]{Timeout: time.Minute, Do: func(context.Context) (int, error) { <-release; return 7, nil }}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := r.Get(ctx); err != context.Canceled {
		t.Errorf("cancelled caller: %v, want context.Canceled", err)
	}
	close(release)
	if res, err := r.Get(context.Background()); err != nil || res.Value != 7 {
		t.Errorf("next caller: %v %v, want 7", res.Value, err)
	}
}
