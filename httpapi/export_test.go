package httpapi

import "time"

// SetNow sets the clock a Server checks token validity against.
func SetNow(s *Server, now func() time.Time) { s.now = now }
