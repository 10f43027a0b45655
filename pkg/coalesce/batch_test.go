package coalesce

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestBatchKeysShareTheNextRead: keys asked while a read is under way go out together
// in the next read, sent after they were asked; each caller gets its own key's value,
// and a key the read did not find is reported missing.
func TestBatchKeysShareTheNextRead(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var reads [][]string
	b := &Batch[string, string]{Timeout: time.Minute, Do: func(_ context.Context, keys []string) (map[string]string, error) {
		mu.Lock()
		reads = append(reads, slices.Clone(keys))
		first := len(reads) == 1
		mu.Unlock()
		if first {
			<-release
		}
		out := map[string]string{}
		for _, k := range keys {
			if k != "gone" {
				out[k] = "value of " + k
			}
		}
		return out, nil
	}}
	first := make(chan string)
	go func() {
		v, _, _ := b.Get(context.Background(), "a")
		first <- v
	}()
	sent := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(reads)
	}
	deadline := time.Now().Add(time.Minute)
	for sent() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the first read was never sent")
		}
		time.Sleep(time.Millisecond)
	}
	late := []string{"a", "b", "c", "b", "gone"}
	type answer struct {
		v  string
		ok bool
	}
	got := make([]answer, len(late))
	var wg sync.WaitGroup
	for i, k := range late {
		wg.Go(func() {
			v, ok, err := b.Get(context.Background(), k)
			if err != nil {
				t.Error(err)
			}
			got[i] = answer{v, ok}
		})
	}
	for {
		b.mu.Lock()
		n := 0
		if b.next != nil {
			n = len(b.next.keys)
		}
		b.mu.Unlock()
		if n == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d distinct keys wait for the next read, want 4", n)
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	if v := <-first; v != "value of a" {
		t.Errorf("first caller got %q", v)
	}
	wg.Wait()
	for i, k := range late {
		want := answer{"value of " + k, true}
		if k == "gone" {
			want = answer{}
		}
		if got[i] != want {
			t.Errorf("caller of %s got %+v, want %+v", k, got[i], want)
		}
	}
	if len(reads) != 2 || !slices.Equal(slices.Sorted(slices.Values(reads[1])), []string{"a", "b", "c", "gone"}) {
		t.Errorf("reads %v, want [a] then the four late keys once each", reads)
	}
}

// TestBatchError: every caller of a failed read gets its error.
func TestBatchError(t *testing.T) {
	boom := errors.New("boom")
	b := &Batch[int, int]{Timeout: time.Minute, Do: func(context.Context, []int) (map[int]int, error) { return nil, boom }}
	if _, ok, err := b.Get(context.Background(), 1); !errors.Is(err, boom) || ok {
		t.Errorf("Get: %v %v, want the read's error", ok, err)
	}
}
