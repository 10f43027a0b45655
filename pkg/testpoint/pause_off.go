//go:build !kubefence_testpoints

package testpoint

// Enabled: this binary was built without BuildTag; Env is ignored.
const Enabled = false

// Pauser is the pause points' stand-in in a binary built without BuildTag: it never
// pauses.
type Pauser struct{}

// New ignores point: without BuildTag nothing pauses.
func New(point string) *Pauser { return &Pauser{} }

// At does nothing without BuildTag.
func (p *Pauser) At(point string) {}
