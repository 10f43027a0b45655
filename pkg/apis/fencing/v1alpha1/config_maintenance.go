package v1alpha1

import (
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Bounds and default of Maintenance.MaxWindow.
const (
	DefaultMaintenanceWindow = time.Hour
	MinMaintenanceWindow     = time.Second
	MaxMaintenanceWindow     = 7 * 24 * time.Hour
)

// Default fills the unset fields.
func (m *Maintenance) Default() {
	defaultDuration(&m.MaxWindow, DefaultMaintenanceWindow)
	if m.Cordoned == "" {
		m.Cordoned = CordonWhenDrained
	}
}

func (m *Maintenance) validate(p *field.Path) field.ErrorList {
	errs := within(p.Child("maxWindow"), m.MaxWindow, MinMaintenanceWindow, MaxMaintenanceWindow)
	switch m.Cordoned {
	case CordonWhenDrained, CordonAlways, CordonNever:
	default:
		errs = append(errs, field.NotSupported(p.Child("cordoned"), m.Cordoned,
			[]CordonRule{CordonWhenDrained, CordonAlways, CordonNever}))
	}
	return errs
}
