// Package tombstone unwraps the last known state an informer hands a delete handler when
// its watch missed the delete (cache.DeletedFinalStateUnknown). It knows no kind and
// imports nothing of kubefence, so that every controller's handlers may use it.
package tombstone

import "k8s.io/client-go/tools/cache"

// Unwrap is the deleted object obj stands for: the last state a missed delete left in
// the cache, or obj itself.
func Unwrap(obj any) any {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return d.Obj
	}
	return obj
}
