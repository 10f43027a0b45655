package redfish

import (
	"fmt"
	"time"
)

// Actions in a system's power log; the same words as test/sim/bmc's IPMI power log.
const (
	ActionOn         = "on"
	ActionOff        = "off"
	ActionReset      = "reset"
	ActionShutdown   = "shutdown"
	ActionIgnoredOff = "ignored-off"
)

// Sources of power log entries.
const (
	// SourceBMC marks requests that came over Redfish.
	SourceBMC = "bmc"
	// SourceSim marks changes made with SetPower.
	SourceSim = "sim"
)

// Reset types served in ResetType@Redfish.AllowableValues; bmclib's PowerSet sends
// On, ForceOff, ForceRestart and GracefulShutdown ("soft"), and gofish refuses to send
// a type that is not listed.
const (
	ResetOn               = "On"
	ResetForceOff         = "ForceOff"
	ResetForceRestart     = "ForceRestart"
	ResetGracefulShutdown = "GracefulShutdown"
)

var allowedResetTypes = []string{ResetOn, ResetForceOff, ResetForceRestart, ResetGracefulShutdown}

// PowerEvent is one entry of a system's power log.
type PowerEvent struct {
	// Time is when the power actually changed (after any TransitionDelay) or, for
	// ActionIgnoredOff and a restart, when the request was handled.
	Time time.Time
	// Action is one of ActionOn, ActionOff, ActionReset, ActionShutdown, ActionIgnoredOff.
	Action string
	// Source is SourceBMC or SourceSim.
	Source string
}

// system is one ComputerSystem. Its fields are guarded by Server.mu.
type system struct {
	id             string
	on             bool
	ignorePowerOff bool
	uuid           string
	// pending is a power change requested but not yet in effect.
	pending *transition
	events  []PowerEvent
}

type transition struct {
	on     bool
	action string
	at     time.Time
}

// settle applies a pending transition whose time has come. Every reader calls it
// first, so no goroutine has to run the clock.
func (s *system) settle(now time.Time) {
	if s.pending == nil || now.Before(s.pending.at) {
		return
	}
	p := s.pending
	s.pending = nil
	s.on = p.on
	s.events = append(s.events, PowerEvent{Time: p.at, Action: p.action, Source: SourceBMC})
}

// powerState is the Redfish PowerState property.
func (s *system) powerState() string {
	switch {
	case s.pending != nil && s.pending.on:
		return "PoweringOn"
	case s.pending != nil:
		return "PoweringOff"
	case s.on:
		return "On"
	default:
		return "Off"
	}
}

// reset handles ComputerSystem.Reset. It returns an error for a reset type it does
// not serve; everything else is accepted, as real BMCs accept an idempotent request.
func (s *system) reset(resetType string, now time.Time, delay time.Duration) error {
	s.settle(now)
	switch resetType {
	case ResetOn:
		s.change(true, ActionOn, now, delay)
	case ResetForceOff, ResetGracefulShutdown:
		action := ActionOff
		if resetType == ResetGracefulShutdown {
			action = ActionShutdown
		}
		if s.ignorePowerOff {
			s.events = append(s.events, PowerEvent{Time: now, Action: ActionIgnoredOff, Source: SourceBMC})
			return nil
		}
		s.change(false, action, now, delay)
	case ResetForceRestart:
		// A restart is instantaneous off-and-on: the power ends up on either way.
		s.pending = nil
		s.on = true
		s.events = append(s.events, PowerEvent{Time: now, Action: ActionReset, Source: SourceBMC})
	default:
		return fmt.Errorf("reset type %q is not one of %v", resetType, allowedResetTypes)
	}
	return nil
}

// change starts (or, with no delay, makes) a power change. A request for the state the
// system is already in or heading to changes nothing and logs nothing.
func (s *system) change(on bool, action string, now time.Time, delay time.Duration) {
	if s.pending != nil {
		if s.pending.on == on {
			return
		}
		s.pending = nil // reversed mid-transition: the old target never takes effect
	}
	if s.on == on {
		return
	}
	s.pending = &transition{on: on, action: action, at: now.Add(delay)}
	s.settle(now)
}

// set is SetPower: the sim's own hand, immediate, and not subject to IgnorePowerOff,
// which models broken BMC firmware rather than a broken power supply.
func (s *system) set(on bool, now time.Time) {
	s.settle(now)
	s.pending = nil
	s.on = on
	action := ActionOff
	if on {
		action = ActionOn
	}
	s.events = append(s.events, PowerEvent{Time: now, Action: action, Source: SourceSim})
}
