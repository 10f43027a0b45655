package caches

import (
	"context"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
)

// Unsynced is an informer whose cache did not sync, and why, as far as it knows.
type Unsynced struct {
	// Informer names the kind and the objects watched: "ConfigMap (namespace
	// kubefence-system, fields metadata.name=kubefence-pause)".
	Informer string
	// LastError is the last error the informer's list or watch met; nil when it met none
	// (the API server was merely slow).
	LastError error
}

func (u Unsynced) String() string {
	switch {
	case u.LastError == nil:
		return u.Informer + ": no list or watch error seen"
	case apierrors.IsNotFound(u.LastError) || meta.IsNoMatchError(u.LastError):
		return fmt.Sprintf("%s: %v (the API server does not serve this kind: is its CustomResourceDefinition installed?)", u.Informer, u.LastError)
	default:
		return fmt.Sprintf("%s: %v", u.Informer, u.LastError)
	}
}

// SyncError is a start whose caches did not all sync.
type SyncError struct {
	// Within is the time the caches had; zero: the start was cancelled first.
	Within time.Duration
	// Unsynced are the caches that did not sync.
	Unsynced []Unsynced
}

func (e *SyncError) Error() string {
	parts := make([]string, len(e.Unsynced))
	for i, u := range e.Unsynced {
		parts[i] = u.String()
	}
	when := "before the start was cancelled"
	if e.Within > 0 {
		when = "within " + e.Within.String()
	}
	return fmt.Sprintf("informer caches did not sync %s: %s", when, strings.Join(parts, "; "))
}

// Start starts every informer a controller asked for, and waits until each has synced or
// ctx ends.
func (s *Set) Start(ctx context.Context) error { return s.StartWithin(ctx, 0) }

// StartWithin starts every informer a controller asked for, and waits until each has
// synced, for at most timeout (zero: until ctx ends). A cache that did not sync is a
// *SyncError naming it and the last error its list or watch met: a controller that
// cannot read what it watches (RBAC forbids it, a CustomResourceDefinition is missing)
// would otherwise wait in silence, its informers retrying forever. The informers go on
// until ctx ends either way.
func (s *Set) StartWithin(ctx context.Context, timeout time.Duration) error {
	for _, f := range s.waiters {
		f.Start(ctx.Done())
	}
	wait := ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		wait, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	var out []Unsynced
	for _, f := range s.waiters {
		out = append(out, f.unsynced(wait)...)
	}
	if len(out) == 0 {
		return nil
	}
	if ctx.Err() != nil {
		timeout = 0
	}
	return &SyncError{Within: timeout, Unsynced: out}
}
