package serving

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Cache bounds and lifetimes, those of kube-apiserver's delegating authenticator and
// authorizer: a Prometheus scraping every few seconds costs the apiserver one review of
// each kind per TTL, and a revoked token or binding stops working within one TTL.
const (
	DefaultCacheTTL  = 10 * time.Second
	DefaultCacheSize = 1024
)

// Delegated authenticates a request's bearer token with a TokenReview and authorizes its
// identity with a SubjectAccessReview for the request's verb on its path (a
// nonResourceURL), both against the apiserver, as kube-controller-manager does.
type Delegated struct {
	client kubernetes.Interface
	ttl    time.Duration
	authn  *cache.LRUExpireCache // token digest -> *authenticationv1.UserInfo (nil: not authenticated)
	authz  *cache.LRUExpireCache // digest of the review's spec -> bool
}

// NewDelegated returns a filter reviewing with client; results are kept for ttl, at most
// size of each kind. c is the clock of the caches' expiry.
func NewDelegated(client kubernetes.Interface, ttl time.Duration, size int, c clock.PassiveClock) *Delegated {
	return &Delegated{
		client: client, ttl: ttl,
		authn: cache.NewLRUExpireCacheWithClock(size, c),
		authz: cache.NewLRUExpireCacheWithClock(size, c),
	}
}

// Wrap serves next only to requests whose token is valid (401 otherwise) and whose
// identity may use the request's verb on its path (403 otherwise).
func (d *Delegated) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := bearerToken(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="kubefence"`)
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		user, err := d.authenticate(r.Context(), token)
		if err != nil {
			klog.ErrorS(err, "Reviewing a metrics client's token", "path", r.URL.Path, "remote", r.RemoteAddr)
			http.Error(w, "Internal Server Error", http.StatusInternalServerError)
			return
		}
		if user == nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="kubefence"`)
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		allowed, err := d.authorize(r.Context(), user, verb(r.Method), r.URL.Path)
		if err != nil {
			klog.ErrorS(err, "Reviewing a metrics client's access", "user", user.Username, "path", r.URL.Path)
			http.Error(w, "Internal Server Error", http.StatusInternalServerError)
			return
		}
		if !allowed {
			klog.V(4).InfoS("Metrics request forbidden", "user", user.Username, "path", r.URL.Path)
			http.Error(w, "Forbidden", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// bearerToken is the token of an "Authorization: Bearer" header.
func bearerToken(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	token = strings.TrimSpace(token)
	return token, ok && strings.EqualFold(scheme, "bearer") && token != ""
}

// verb is the authorization verb of an HTTP method on a nonResourceURL, as the apiserver
// names it.
func verb(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead:
		return "get"
	case http.MethodPost:
		return "create"
	case http.MethodPut:
		return "update"
	}
	return strings.ToLower(method)
}

// authenticate returns the token's user, or nil when the apiserver does not vouch for it.
// Only a digest of the token is kept.
func (d *Delegated) authenticate(ctx context.Context, token string) (*authenticationv1.UserInfo, error) {
	sum := sha256.Sum256([]byte(token))
	key := hex.EncodeToString(sum[:])
	if v, ok := d.authn.Get(key); ok {
		return v.(*authenticationv1.UserInfo), nil
	}
	review, err := d.client.AuthenticationV1().TokenReviews().Create(ctx,
		&authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("token review: %w", err)
	}
	var user *authenticationv1.UserInfo
	if review.Status.Authenticated {
		user = &review.Status.User
	}
	d.authn.Add(key, user, d.ttl)
	return user, nil
}

// authorize asks whether user may use verb on the nonResourceURL path.
func (d *Delegated) authorize(ctx context.Context, user *authenticationv1.UserInfo, verb, path string) (bool, error) {
	spec := authorizationv1.SubjectAccessReviewSpec{
		User: user.Username, UID: user.UID, Groups: user.Groups,
		NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: verb},
	}
	if len(user.Extra) > 0 {
		spec.Extra = make(map[string]authorizationv1.ExtraValue, len(user.Extra))
		for k, v := range user.Extra {
			spec.Extra[k] = authorizationv1.ExtraValue(v)
		}
	}
	// The spec has no secret in it; its JSON (map keys sorted) is the cache key.
	raw, err := json.Marshal(spec)
	if err != nil {
		return false, fmt.Errorf("subject access review key: %w", err)
	}
	sum := sha256.Sum256(raw)
	key := hex.EncodeToString(sum[:])
	if v, ok := d.authz.Get(key); ok {
		return v.(bool), nil
	}
	review, err := d.client.AuthorizationV1().SubjectAccessReviews().Create(ctx,
		&authorizationv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		return false, fmt.Errorf("subject access review: %w", err)
	}
	d.authz.Add(key, review.Status.Allowed, d.ttl)
	return review.Status.Allowed, nil
}
