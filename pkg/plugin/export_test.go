package plugin

// AgentBinaryForTest returns the directory, name and SHA-256 of the test agent binary
// that TestMain built, for the external tests of this package.
func AgentBinaryForTest() (dir, name, sum string) { return agentDir, testAgent, agentSum }

// SyncBuffer is a log sink safe for go-plugin's goroutines.
type SyncBuffer = syncBuffer
