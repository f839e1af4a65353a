package memory

// SystemName implements contract.SystemNamer: the db.system.name of the
// Store's spans and metrics.
func (*Backend) SystemName() string { return "memory" }
