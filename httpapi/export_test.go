package httpapi

import "time"

// SetNow sets the clock a Server checks token validity against.
func SetNow(s *Server, now func() time.Time) { s.now = now }

// StreamsWaitedOn is how many protocol streams have readers waiting on this instance's
// changes: tests wait on it instead of sleeping.
func StreamsWaitedOn(s *Server) int {
	s.streamChanges.mu.Lock()
	defer s.streamChanges.mu.Unlock()
	return len(s.streamChanges.ch)
}
