package checkpoint

// PendingWrites is how many checkpoints wait for a group-commit slot: tests wait on it instead
// of sleeping.
func PendingWrites(s *Store) int {
	s.group.mu.Lock()
	defer s.group.mu.Unlock()
	return len(s.group.pending)
}
