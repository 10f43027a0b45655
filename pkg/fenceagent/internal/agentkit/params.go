package agentkit

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kubefence/kubefence/pkg/plugin"
)

// Reader reads one request's non-secret params against an agent's parameter specs.
// A value that does not parse is recorded rather than returned as an error, so that a
// caller reads every parameter and Err reports all problems at once, in the order they
// were found, each naming its parameter.
type Reader struct {
	in       map[string]string
	specs    map[string]plugin.Param
	problems []plugin.ParamError
}

// NewReader returns a Reader of in; specs supply the defaults and tell known and secret
// names apart.
func NewReader(specs []plugin.Param, in map[string]string) *Reader {
	r := &Reader{in: in, specs: make(map[string]plugin.Param, len(specs))}
	for _, s := range specs {
		r.specs[s.Name] = s
	}
	return r
}

// CheckNames looks at every param by name, in sorted order so that the error does not
// change from call to call. A param whose spec is a secret is refused: secrets travel
// in Request.Secrets only. A param no spec names is handed to extra, with its value as
// given, which returns why it refuses it ("" to accept), or refused as unknown when
// extra is nil.
func (r *Reader) CheckNames(extra func(name, value string) string) {
	for _, name := range slices.Sorted(maps.Keys(r.in)) {
		spec, ok := r.specs[name]
		switch {
		case ok && spec.Secret:
			r.Errorf(name, "is a secret; pass it in the agent's secret, not in params")
		case ok:
		case extra == nil:
			r.Errorf(name, "unknown parameter")
		default:
			if why := extra(name, r.in[name]); why != "" {
				r.Errorf(name, "%s", why)
			}
		}
	}
}

// String returns the param without surrounding white space, or its spec's default when
// the request does not set it. A param that is set to "" stays "".
func (r *Reader) String(name string) string {
	if v, ok := r.in[name]; ok {
		return strings.TrimSpace(v)
	}
	return r.specs[name].Default
}

// PositiveDuration returns the param as a duration above zero, or records that it is
// not one and returns 0.
func (r *Reader) PositiveDuration(name string) time.Duration {
	v := r.String(name)
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		r.Errorf(name, "%q is not a positive duration", v)
		return 0
	}
	return d
}

// Int returns the param as an integer from lo to hi, or records that it is not what
// (as in "a port number") and returns 0.
func (r *Reader) Int(name string, lo, hi int, what string) int {
	v := r.String(name)
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		r.Errorf(name, "%q is not %s", v, what)
		return 0
	}
	return n
}

// Bool returns the param as strconv.ParseBool reads it, or records that it is not a
// boolean and returns false.
func (r *Reader) Bool(name string) bool {
	v := r.String(name)
	b, err := strconv.ParseBool(v)
	if err != nil {
		r.Errorf(name, "%q is not true or false", v)
		return false
	}
	return b
}

// NotLonger records that the duration d of param name exceeds limit, the value of param
// limitName, as a poll interval longer than its verify timeout would read only once. A
// zero d or limit is one that did not parse and has already been reported.
func (r *Reader) NotLonger(name string, d time.Duration, limitName string, limit time.Duration) {
	if d > 0 && limit > 0 && d > limit {
		r.Errorf(name, "%s is longer than %s %s", d, limitName, limit)
	}
}

// Errorf records a problem of parameter name that the agent found itself.
func (r *Reader) Errorf(name, format string, args ...any) {
	r.problems = append(r.problems, plugin.ParamError{Name: name, Detail: fmt.Sprintf(format, args...)})
}

// Err returns every recorded problem as one permanent error that names each parameter
// (plugin.InvalidParams), or nil: a bad parameter does not get better by retrying.
func (r *Reader) Err() error {
	if len(r.problems) == 0 {
		return nil
	}
	return plugin.InvalidParams(r.problems)
}

// Parsed returns p when r recorded no problem, or the zero P and Err: the last step of
// every agent's parser of its params.
func Parsed[P any](r *Reader, p P) (P, error) {
	if err := r.Err(); err != nil {
		var zero P
		return zero, err
	}
	return p, nil
}
