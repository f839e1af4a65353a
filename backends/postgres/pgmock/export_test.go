package pgmock

// SentNames reports the names of the statements m registered so far.
func SentNames(m *Mock) map[string]bool { return m.sentNames() }
