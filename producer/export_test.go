package producer

// SetDirectSink makes d's fast writes go to sink instead of the sockets (BenchmarkFanoutDirect).
func SetDirectSink(d *DirectWriter, sink func([]byte) (int, error)) { d.sink = sink }
