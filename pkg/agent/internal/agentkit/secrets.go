package agentkit

// Missing returns those of keys whose value in secrets is empty or absent, in the order
// of keys. It names keys only, never values.
func Missing(secrets map[string]string, keys ...string) []string {
	var missing []string
	for _, k := range keys {
		if secrets[k] == "" {
			missing = append(missing, k)
		}
	}
	return missing
}
