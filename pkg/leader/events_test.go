package leader

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
)

// deadline, and the refusal is one the broadcaster does not retry.
func TestConfirmedSinkDropsUnconfirmed(t *testing.T) {
	client := fake.NewSimpleClientset()
	until := time.Now().Add(-time.Second)
	s := confirmedSink{events: client.CoreV1().Events(""), until: func() time.Time { return until }}
	ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: "default"}}
	_, err := s.Create(ev)
	sent := func() int {
		l, _ := client.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{})
		return len(l.Items)
	}
	if err == nil || sent() != 0 {
		t.Fatalf("unconfirmed: err %v, %d sent", err, sent())
	}
	if !apierrors.IsServiceUnavailable(err) {
		t.Errorf("refusal %T %v is not a StatusError the broadcaster gives up on", err, err)
	}
	until = time.Now().Add(time.Minute)
	if _, err := s.Create(ev); err != nil || sent() != 1 {
		t.Errorf("confirmed: err %v, %d sent", err, sent())
	}
}

// TestConfirmedSinkReconfirms: an Event whose confirmation ran out while it waited in the
// broadcaster's queue goes out after a Lease check of its own passes, and is dropped when
// that check fails (a deposed replica).
func TestConfirmedSinkReconfirms(t *testing.T) {
	client := fake.NewSimpleClientset()
	until := time.Now().Add(-time.Second)
	var checkErr error
	checks := 0
	s := confirmedSink{events: client.CoreV1().Events(""), until: func() time.Time { return until },
		reconfirm: func(context.Context) error {
			checks++
			if checkErr == nil {
				until = time.Now().Add(time.Minute)
			}
			return checkErr
		}}
	sent := func() int {
		l, _ := client.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{})
		return len(l.Items)
	}
	checkErr = errors.New("lease held by another replica")
	if _, err := s.Create(&corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "default"}}); err == nil || sent() != 0 || checks != 1 {
		t.Fatalf("failed check: err %v, %d sent, %d checks; want refused after one check", err, sent(), checks)
	}
	checkErr = nil
	if _, err := s.Create(&corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "default"}}); err != nil || sent() != 1 || checks != 2 {
		t.Fatalf("passed check: err %v, %d sent, %d checks; want sent after one check", err, sent(), checks)
	}
	if _, err := s.Create(&corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "default"}}); err != nil || sent() != 2 || checks != 2 {
		t.Errorf("confirmed: err %v, %d sent, %d checks; want sent with no new check", err, sent(), checks)
	}
}

// TestConfirmedSinkRequestEndsWithConfirmation: the request itself carries the
// confirmation's end as its deadline, so a replica paused between the check and the send
// abandons it on waking. Here the API server holds the request until the client gives up.
func TestConfirmedSinkRequestEndsWithConfirmation(t *testing.T) {
	seen, release := make(chan struct{}, 1), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case seen <- struct{}{}:
		default:
		}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release) // before Close, which waits for the handler
	client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	until := time.Now().Add(300 * time.Millisecond)
	s := confirmedSink{events: client.CoreV1().Events(""), until: func() time.Time { return until }}
	_, err = s.Create(&corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: "default"}})
	select {
	case <-seen:
	default:
		t.Fatal("the request never reached the server")
	}
	if !apierrors.IsServiceUnavailable(err) {
		t.Fatalf("a request outliving its confirmation returned %v, want the unconfirmed refusal", err)
	}
	if time.Now().Before(until) {
		t.Fatalf("the request ended before its deadline %s", until)
	}
}

// TestConfirmedSinkUpdateAndPatch: the broadcaster sends a repeated Event as a patch of
// the first (its count) and may update it; like a create, either goes out only while a
// Lease check vouches for this replica, so a paused leader cannot touch Events after a
// standby took over, and is refused in a way the broadcaster does not retry.
func TestConfirmedSinkUpdateAndPatch(t *testing.T) {
	first := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "node-1.fenced", Namespace: "default"}, Reason: "Fenced", Count: 1}
	for name, send := range map[string]func(confirmedSink) (*corev1.Event, error){
		"update": func(s confirmedSink) (*corev1.Event, error) {
			e := first.DeepCopy()
			e.Count = 2
			return s.Update(e)
		},
		"patch": func(s confirmedSink) (*corev1.Event, error) { return s.Patch(first, []byte(`{"count":2}`)) },
	} {
		for _, confirmed := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s, confirmed %v", name, confirmed), func(t *testing.T) {
				client := fake.NewClientset(first)
				until := time.Now().Add(time.Minute)
				if !confirmed {
					until = time.Now().Add(-time.Second)
				}
				_, err := send(confirmedSink{events: client.CoreV1().Events(""), until: func() time.Time { return until }})
				got, gerr := client.CoreV1().Events("default").Get(context.Background(), first.Name, metav1.GetOptions{})
				if gerr != nil {
					t.Fatal(gerr)
				}
				switch {
				case confirmed && (err != nil || got.Count != 2):
					t.Errorf("confirmed: err %v, count %d; want sent", err, got.Count)
				case !confirmed && (!apierrors.IsServiceUnavailable(err) || got.Count != 1):
					t.Errorf("unconfirmed: err %v, count %d; want refused as unavailable, the Event unchanged", err, got.Count)
				}
			})
		}
	}
}
