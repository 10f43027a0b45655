package agentkit

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/kubefence/kubefence/pkg/plugin"
)

// stampLayout is how each step of the evidence is timed: UTC, to the millisecond.
const stampLayout = "2006-01-02T15:04:05.000Z"

// Evidence is one call's record of what it did and read, step by step, as a person
// reads it in the NodeFence. Every step is scrubbed of the call's secrets as it is
// added; callers pass none, and the scrub guards against those a device echoes. The
// zero Evidence has no secrets.
type Evidence struct {
	secrets []string
	steps   []string
	// now stamps the steps; nil is time.Now. Tests set it.
	now func() time.Time
	// identity is the device's own identity as read, "" until CheckIdentity read one.
	identity string
}

// NewEvidence returns an empty record that scrubs secrets from every step.
func NewEvidence(secrets ...string) Evidence {
	return Evidence{secrets: slices.Clone(secrets)}
}

// Note adds a step, stamped with the time.
func (e *Evidence) Note(format string, args ...any) {
	now := time.Now
	if e.now != nil {
		now = e.now
	}
	e.steps = append(e.steps, e.Scrub(now().UTC().Format(stampLayout)+" "+fmt.Sprintf(format, args...)))
}

// Scrub removes the record's secrets from text, for errors that quote a device.
func (e *Evidence) Scrub(text string) string { return Scrub(text, e.secrets...) }

// Steps returns a copy of the steps so far, oldest first.
func (e *Evidence) Steps() []string { return slices.Clone(e.steps) }

// Result is what the call observed: state, and the steps joined by "; ".
func (e *Evidence) Result(state plugin.PowerState) plugin.Result {
	return plugin.Result{State: state, Evidence: strings.Join(e.steps, "; "), Identity: e.identity}
}

// Message returns the text of err without the kind that a plugin error's Error puts
// before it, for an error that quotes another; "" for nil.
func Message(err error) string {
	if err == nil {
		return ""
	}
	var pe *plugin.Error
	if errors.As(err, &pe) {
		return pe.Message
	}
	return err.Error()
}
