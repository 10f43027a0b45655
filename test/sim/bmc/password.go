package bmc

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// SetPassword changes the admin user's password on the running BMC, as an operator
// rotating it does (ipmitool user set password), while ipmi_sim keeps running: from then
// on the BMC refuses the old one. The test's own commands use the new one.
func (s *IPMISim) SetPassword(ctx context.Context, password string) error {
	if err := checkCredentials(s.opts.User, password); err != nil {
		return fmt.Errorf("set password: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// User 2 is the one lan.conf defines. The new password goes on ipmitool's argv: this
	// is the test administering its BMC, not kubefence.
	if _, err := s.ipmitool(ctx, "user", "set", "password", "2", password); err != nil {
		return fmt.Errorf("set password: %w", err)
	}
	if err := os.WriteFile(filepath.Join(s.opts.Dir, passwordFile), []byte(password), 0o600); err != nil {
		return fmt.Errorf("set password: %w", err)
	}
	s.opts.Password = password
	return nil
}
