package v1alpha1

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Bounds of the configuration's numbers, per field: wide enough for every sane setting,
// narrow enough to catch a unit slip (292 years, a 1ns timeout, a million retries).
// docs/configuration.md lists them.
const (
	MinCallTimeout = 100 * time.Millisecond
	MaxCallTimeout = time.Hour
	// MaxWatchdogIsolation bounds watchdog.isolation: a node cut off for longer is
	// counted on to reset itself only after it.
	MaxWatchdogIsolation = 10 * time.Minute
	MaxDetection         = time.Hour
	MaxFlapWindow        = 24 * time.Hour
	MaxCooldown          = 7 * 24 * time.Hour
	MaxBackoff           = 10 * time.Minute
	MaxLeaderTiming      = 10 * time.Minute
	MaxLevelRetries      = 20
	MaxFlapThreshold     = 100
	MaxConcurrent        = 10000
	MaxFencesPerMin      = 1000
	MaxHistoryAge        = 365 * 24 * time.Hour
	MaxHistoryPerNode    = 1000
	// MaxLevels and MaxLevelAgents keep an incident's attempts (levels x agents x
	// (MaxLevelRetries+1), at most 2,100) well inside the NodeFence CRD's 5,000.
	MaxLevels      = 10
	MaxLevelAgents = 10
	// MaxAgents and MaxPolicies bound the file's two lists: far more than a cluster's
	// kinds of fence device and node groups.
	MaxAgents   = 100
	MaxPolicies = 100
	// MaxParams and MaxParamsBytes bound an agent's params and a NetworkFence's
	// parameters: every call carries them, and an agent names each one it does not know.
	// The bytes count every name and value, room for a Redfish caBundle of a few dozen
	// certificates.
	MaxParams      = 64
	MaxParamsBytes = 64 << 10
	// MaxSelectorTerms bounds a nodeSelector's matchLabels and matchExpressions each,
	// and MaxSelectorValues the values of one expression.
	MaxSelectorTerms  = 64
	MaxSelectorValues = 256
	// MaxAddressTypes: a NetworkFence fences InternalIP, ExternalIP or both.
	MaxAddressTypes = 2
)

// tooMany refuses a list or map of n items where at most max are allowed.
func tooMany(p *field.Path, n, max int) field.ErrorList {
	if n > max {
		return field.ErrorList{field.TooMany(p, n, max)}
	}
	return nil
}

// boundedParams checks the count and the size of a map of parameters. Neither names nor
// values are quoted back: a password put in params by mistake must not reach a log.
func boundedParams(p *field.Path, params map[string]string) field.ErrorList {
	if len(params) > MaxParams {
		return tooMany(p, len(params), MaxParams)
	}
	size := 0
	for k, v := range params {
		size += len(k) + len(v)
	}
	if size > MaxParamsBytes {
		return field.ErrorList{field.TooLong(p, "", MaxParamsBytes)}
	}
	return nil
}

// boundedSelector checks a nodeSelector's counts.
func boundedSelector(p *field.Path, s *metav1.LabelSelector) field.ErrorList {
	if s == nil {
		return nil
	}
	errs := tooMany(p.Child("matchLabels"), len(s.MatchLabels), MaxSelectorTerms)
	errs = append(errs, tooMany(p.Child("matchExpressions"), len(s.MatchExpressions), MaxSelectorTerms)...)
	for i, e := range s.MatchExpressions {
		errs = append(errs, tooMany(p.Child("matchExpressions").Index(i).Child("values"), len(e.Values), MaxSelectorValues)...)
	}
	return errs
}

// within checks lo <= d <= hi.
func within(p *field.Path, d metav1.Duration, lo, hi time.Duration) field.ErrorList {
	if d.Duration < lo || d.Duration > hi {
		return field.ErrorList{field.Invalid(p, d.Duration.String(), fmt.Sprintf("must be from %s to %s", lo, hi))}
	}
	return nil
}

// intWithin checks lo <= n <= hi.
func intWithin(p *field.Path, n, lo, hi int64) field.ErrorList {
	if n < lo || n > hi {
		return field.ErrorList{field.Invalid(p, n, fmt.Sprintf("must be from %d to %d", lo, hi))}
	}
	return nil
}

// dnsLabel checks a name that must be an RFC 1123 label: a policy's name, a namespace.
func dnsLabel(p *field.Path, s string) field.ErrorList {
	if msgs := validation.IsDNS1123Label(s); len(msgs) > 0 {
		return field.ErrorList{field.Invalid(p, s, strings.Join(msgs, "; "))}
	}
	return nil
}

// dnsSubdomain checks the name of a Kubernetes object (a Lease, a Secret).
func dnsSubdomain(p *field.Path, s string) field.ErrorList {
	if msgs := validation.IsDNS1123Subdomain(s); len(msgs) > 0 {
		return field.ErrorList{field.Invalid(p, s, strings.Join(msgs, "; "))}
	}
	return nil
}

// qualifiedKey checks a label or annotation key.
func qualifiedKey(p *field.Path, s string) field.ErrorList {
	if msgs := validation.IsQualifiedName(s); len(msgs) > 0 {
		return field.ErrorList{field.Invalid(p, s, "not a valid label or annotation key: "+strings.Join(msgs, "; "))}
	}
	return nil
}

// hostPort checks host:port with both parts present: the host an IP address or a DNS
// name, the port from 1 to 65535.
func hostPort(p *field.Path, s string) field.ErrorList {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return field.ErrorList{field.Invalid(p, s, "must be host:port")}
	}
	var errs field.ErrorList
	if host == "" {
		errs = append(errs, field.Invalid(p, s, "the host is missing (want host:port)"))
	} else if net.ParseIP(host) == nil && len(validation.IsDNS1123Subdomain(strings.ToLower(host))) > 0 {
		errs = append(errs, field.Invalid(p, s, "the host is neither an IP address nor a DNS name"))
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		errs = append(errs, field.Invalid(p, s, "the port must be a number from 1 to 65535"))
	}
	return errs
}

// maxUnhealthy checks a count (0 or more) or a percentage from 0% to 100%.
func maxUnhealthy(p *field.Path, v *intstr.IntOrString) field.ErrorList {
	if v == nil {
		return nil
	}
	if v.Type == intstr.Int {
		if v.IntVal < 0 {
			return field.ErrorList{field.Invalid(p, v.IntVal, "must be a count of 0 or more, or a percentage")}
		}
		return nil
	}
	n, err := strconv.Atoi(strings.TrimSuffix(v.StrVal, "%"))
	if err != nil || !strings.HasSuffix(v.StrVal, "%") || n < 0 || n > 100 {
		return field.ErrorList{field.Invalid(p, v.StrVal, "must be a percentage from 0% to 100%, or a count")}
	}
	return nil
}
