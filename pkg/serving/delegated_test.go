package serving

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	testingclock "k8s.io/utils/clock/testing"
)

// The tokens the fake apiserver knows: the reader may get /metrics, the stranger may not.
const (
	readerToken   = "reader-token"
	strangerToken = "stranger-token"
)

// fakeAPIServer answers TokenReviews and SubjectAccessReviews as an apiserver with RBAC
// would, and counts them; fail makes every review fail.
type fakeAPIServer struct {
	tokenReviews, accessReviews int
	lastAccess                  authorizationv1.SubjectAccessReviewSpec
	fail                        error
}

func (f *fakeAPIServer) client() *fake.Clientset {
	c := fake.NewClientset()
	c.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		f.tokenReviews++
		if f.fail != nil {
			return true, nil, f.fail
		}
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview).DeepCopy()
		switch tr.Spec.Token {
		case readerToken:
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{
				Username: "system:serviceaccount:monitoring:prometheus", UID: "1", Groups: []string{"system:serviceaccounts"},
				Extra: map[string]authenticationv1.ExtraValue{"authentication.kubernetes.io/pod-name": {"prometheus-0"}}}}
		case strangerToken:
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "system:serviceaccount:default:stranger"}}
		}
		return true, tr, nil
	})
	c.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		f.accessReviews++
		if f.fail != nil {
			return true, nil, f.fail
		}
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview).DeepCopy()
		f.lastAccess = sar.Spec
		na := sar.Spec.NonResourceAttributes
		sar.Status.Allowed = sar.Spec.User == "system:serviceaccount:monitoring:prometheus" && na != nil && na.Path == "/metrics" && na.Verb == "get"
		return true, sar, nil
	})
	return c
}

func get(t *testing.T, h http.Handler, method, auth string) int {
	t.Helper()
	req := httptest.NewRequest(method, "/metrics", nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code
}

var ok = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("metrics")) })

func TestDelegated(t *testing.T) {
	for name, tc := range map[string]struct {
		auth, method             string
		fail                     error
		want, wantTR, wantAccess int
	}{
		"no token":                 {want: http.StatusUnauthorized},
		"basic auth":               {auth: "Basic dXNlcjpwYXNz", want: http.StatusUnauthorized},
		"empty bearer":             {auth: "Bearer ", want: http.StatusUnauthorized},
		"unknown token":            {auth: "Bearer nobody", want: http.StatusUnauthorized, wantTR: 1},
		"token without the role":   {auth: "Bearer " + strangerToken, want: http.StatusForbidden, wantTR: 1, wantAccess: 1},
		"token with the role":      {auth: "Bearer " + readerToken, want: http.StatusOK, wantTR: 1, wantAccess: 1},
		"lower-case scheme":        {auth: "bearer " + readerToken, want: http.StatusOK, wantTR: 1, wantAccess: 1},
		"a verb it lacks":          {auth: "Bearer " + readerToken, method: http.MethodPost, want: http.StatusForbidden, wantTR: 1, wantAccess: 1},
		"apiserver unreachable":    {auth: "Bearer " + readerToken, fail: errors.New("connection refused"), want: http.StatusInternalServerError, wantTR: 1},
		"HEAD is get for the role": {auth: "Bearer " + readerToken, method: http.MethodHead, want: http.StatusOK, wantTR: 1, wantAccess: 1},
	} {
		t.Run(name, func(t *testing.T) {
			api := &fakeAPIServer{fail: tc.fail}
			h := NewDelegated(api.client(), time.Minute, 8, testingclock.NewFakePassiveClock(time.Now())).Wrap(ok)
			method := tc.method
			if method == "" {
				method = http.MethodGet
			}
			if got := get(t, h, method, tc.auth); got != tc.want {
				t.Errorf("status %d, want %d", got, tc.want)
			}
			if api.tokenReviews != tc.wantTR || api.accessReviews != tc.wantAccess {
				t.Errorf("%d TokenReviews and %d SubjectAccessReviews, want %d and %d", api.tokenReviews, api.accessReviews, tc.wantTR, tc.wantAccess)
			}
		})
	}
}

// TestDelegatedReviewsWhatTheTokenSays: the access review is for the token's user, groups,
// UID and extra, on the request's path with verb get.
func TestDelegatedReviewsWhatTheTokenSays(t *testing.T) {
	api := &fakeAPIServer{}
	h := NewDelegated(api.client(), time.Minute, 8, testingclock.NewFakePassiveClock(time.Now())).Wrap(ok)
	if got := get(t, h, http.MethodGet, "Bearer "+readerToken); got != http.StatusOK {
		t.Fatalf("status %d, want 200", got)
	}
	s := api.lastAccess
	if s.User != "system:serviceaccount:monitoring:prometheus" || s.UID != "1" || len(s.Groups) != 1 ||
		len(s.Extra["authentication.kubernetes.io/pod-name"]) != 1 || s.NonResourceAttributes == nil ||
		*s.NonResourceAttributes != (authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"}) || s.ResourceAttributes != nil {
		t.Errorf("access review %+v", s)
	}
}

// TestDelegatedCaches: scrapes within the TTL cost the apiserver nothing, allowed or not;
// after it, each is reviewed again.
func TestDelegatedCaches(t *testing.T) {
	api := &fakeAPIServer{}
	clk := testingclock.NewFakePassiveClock(time.Now())
	h := NewDelegated(api.client(), 10*time.Second, 8, clk).Wrap(ok)
	scrape := func(token string, want int) {
		t.Helper()
		if got := get(t, h, http.MethodGet, "Bearer "+token); got != want {
			t.Fatalf("status %d, want %d", got, want)
		}
	}
	for range 5 {
		scrape(readerToken, http.StatusOK)
		scrape(strangerToken, http.StatusForbidden)
		scrape("nobody", http.StatusUnauthorized)
		clk.SetTime(clk.Now().Add(time.Second))
	}
	if api.tokenReviews != 3 || api.accessReviews != 2 {
		t.Errorf("%d TokenReviews and %d SubjectAccessReviews within the TTL, want 3 and 2", api.tokenReviews, api.accessReviews)
	}
	clk.SetTime(clk.Now().Add(10 * time.Second))
	scrape(readerToken, http.StatusOK)
	if api.tokenReviews != 4 || api.accessReviews != 3 {
		t.Errorf("%d TokenReviews and %d SubjectAccessReviews after the TTL, want 4 and 3", api.tokenReviews, api.accessReviews)
	}
}

// TestDelegatedCacheIsBounded: more tokens than the cache holds evict the oldest.
func TestDelegatedCacheIsBounded(t *testing.T) {
	api := &fakeAPIServer{}
	d := NewDelegated(api.client(), time.Minute, 2, testingclock.NewFakePassiveClock(time.Now()))
	h := d.Wrap(ok)
	for _, tok := range []string{"a", "b", "c", "d"} {
		get(t, h, http.MethodGet, "Bearer "+tok)
	}
	if n := len(d.authn.Keys()); n != 2 {
		t.Errorf("%d cached token reviews, want 2", n)
	}
	get(t, h, http.MethodGet, "Bearer a")
	if api.tokenReviews != 5 {
		t.Errorf("%d TokenReviews, want 5 (the evicted token reviewed again)", api.tokenReviews)
	}
}
