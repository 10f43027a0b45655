package agentkit

import (
	"context"

	"github.com/kubefence/kubefence/pkg/plugin"
)

// Ensurer is one call's hold on a device that can be switched on and off.
type Ensurer interface {
	// Ensure brings the target to want, StateOn or StateOff, and succeeds only once
	// it has read want back from the device. Being there already is success.
	Ensure(ctx context.Context, want plugin.PowerState) error
}

// Lockable is an Ensurer that can also lock a target it has switched off, so that
// nobody else switches it on (an OpenStack server lock). Both succeed when the
// request did not ask for a lock.
type Lockable interface {
	Ensurer
	Lock(ctx context.Context) error
	Unlock(ctx context.Context) error
}

// Power runs a Fence action on t: off and on bring the target to that state, and a
// Lockable target is locked after a verified off and unlocked before it is switched
// on. Reboot is off, verified, then on, rather than one "cycle" command: a reboot
// never seen off proves nothing. A reboot ends on, so it does not lock, and it leaves
// a lock it finds as it was.
func Power(ctx context.Context, t Ensurer, action plugin.Action) error {
	lock, _ := t.(Lockable)
	switch action {
	case plugin.ActionOff:
		if err := t.Ensure(ctx, plugin.StateOff); err != nil || lock == nil {
			return err
		}
		return lock.Lock(ctx)
	case plugin.ActionOn:
		if lock != nil {
			if err := lock.Unlock(ctx); err != nil {
				return err
			}
		}
		return t.Ensure(ctx, plugin.StateOn)
	case plugin.ActionReboot:
		if err := t.Ensure(ctx, plugin.StateOff); err != nil {
			return err
		}
		return t.Ensure(ctx, plugin.StateOn)
	}
	return unsupported(action, PowerActions)
}
